"""The start deadline (issue 29, item 3): an agy that never starts its turn (agy-sim's fault
`AGY_SIM_HANG_AT_START`: a sign-in prompt on stderr, then nothing) is ended, its whole tree; a
warm turn falls back once to `agy -p`, and later turns of that binary run `agy -p` without
waiting for a warm start again; a turn whose `agy -p` does not start either ends with an error
quoting agy's stderr and naming `agy-provider doctor`. Behaviour only: no time is asserted
(`benchmarks/bench_start_deadline.py` measures the bound).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from live_helpers import agy_processes
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer

from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.stdout import StdoutEvents
from agy_provider.live.start_deadline import turn_started
from agy_provider.live.warm.pool import POOL
from agy_provider.live.warm.turn import WarmTurn
from agy_provider.pi.types import UserMessage
from agy_provider.sim.session import HANG_AT_START_WORDS

pytestmark = pytest.mark.slow

# Short for the tests, yet room for agy-sim's `-p` to start on a busy machine.
START_TIMEOUT = "5"


@pytest.fixture
def hung_env(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGY_START_TIMEOUT", START_TIMEOUT)
    monkeypatch.setenv("AGY_WARM", "1")
    return live_env


@pytest.fixture(autouse=True)
def _forget_failed_starts() -> Any:
    """A test's remembered failure must not make the next test's turns run `agy -p`."""
    yield
    POOL.forget_failed_starts()


async def no_agy_left(app: Path) -> list[Any]:
    return await asyncio.to_thread(agy_processes, app)


async def test_a_warm_agy_that_never_starts_falls_back_once_and_is_not_waited_for_again(
    hung_env: Path,
    recorder: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AGY_SIM_HANG_AT_START", "persistent")  # `agy -p` starts as usual
    caplog.set_level(logging.INFO, logger="agy_provider")
    events, message = await run_turn("hello", session="s")
    expect_done(events, message, scenario_answer("default"))
    (first,) = recorder.turns
    assert first.process.request.warm is False and first.process.oneshot is not None
    assert POOL.agys() == []  # the hung warm agy was ended...
    assert await no_agy_left(hung_env) == []  # ...with its whole tree
    said = [r.getMessage() for r in caplog.records if "did not start within" in r.getMessage()]
    assert any(HANG_AT_START_WORDS in m and "agy-provider doctor" in m for m in said), said

    # The next turn of that binary runs `agy -p` at once: no warm agy is started to wait for.
    caplog.clear()
    history = [UserMessage(content="hello", timestamp=0), message]
    events, message = await run_turn("again", session="s", history=history)
    expect_done(events, message, scenario_answer("default"))
    second = recorder.turns[-1]
    assert second.process.agy is None and second.process.oneshot is not None
    assert POOL.agys() == []
    assert not [r for r in caplog.records if "did not start within" in r.getMessage()]
    assert leftovers(hung_env, recorder) == []


@pytest.mark.parametrize(
    ("warm", "version"),
    # agy 1.3's `agy -p` prints its `init` before its own start: the hang comes after it.
    [(True, "1.2.13"), (False, "1.2.13"), (False, "1.3.3")],
    ids=["warm", "one-shot", "one-shot-1.3"],
)
async def test_an_agy_that_never_starts_ends_the_turn_with_its_words_and_what_to_do(
    hung_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, warm: bool, version: str
) -> None:
    monkeypatch.setenv("AGY_WARM", "1" if warm else "0")
    monkeypatch.setenv("AGY_SIM_VERSION", version)
    monkeypatch.setenv("AGY_SIM_HANG_AT_START", "all")
    events, message = await run_turn("hello")
    error = expect_error(events, message)
    text = error.error.error_message or ""
    assert f"did not start the turn within {START_TIMEOUT}s (start_timeout)" in text
    assert HANG_AT_START_WORDS in text and "agy-provider doctor" in text
    assert await no_agy_left(hung_env) == []
    assert leftovers(hung_env, recorder) == []


class _Process:
    """Just what `turn_started` reads of a turn's process."""

    def __init__(self, lines: bytes = b"", *, stated: str = "", code: int | None = None) -> None:
        self.events = StdoutEvents()
        self.events.feed(lines)
        self.stated_conversation_id = stated or self.events.conversation_id
        self.returncode = code


INIT = b'{"event":"init","conversation_id":"c0ffee00-0000-4000-8000-000000000001","init":{}}\n'
STEP = (
    b'{"event":"step_update","step_update":{"conversation_id":'
    b'"c0ffee00-0000-4000-8000-000000000001","step_index":0,"state":"DONE",'
    b'"step_type":"user_input"}}\n'
)


@pytest.mark.parametrize(
    ("process", "started"),
    [
        (_Process(), False),  # nothing yet: a warm agy before its `init`
        (_Process(INIT), False),  # agy 1.3's `-p` prints `init` before its own start
        (_Process(INIT + STEP), True),  # the turn's first step
        (_Process(code=1), True),  # it exited: its exit speaks
        (_Process(stated="c0ffee00-0000-4000-8000-000000000001"), True),  # no stdout events
    ],
    ids=["nothing", "init-only", "first-step", "exited", "stated-without-events"],
)
def test_what_counts_as_a_started_turn(process: _Process, started: bool) -> None:
    assert turn_started(process) is started  # type: ignore[arg-type]


def test_a_warm_agy_has_started_once_it_said_init() -> None:
    # Its `init` comes only after its own start (agy prints it before reading any input).
    turn = WarmTurn(TurnRequest(prompt="hi", cwd=".", agy_bin="agy", warm=True))
    assert not turn_started(turn)
    turn.events.feed(INIT)
    assert turn_started(turn)
