"""Issue 5's acceptance: live turns through the rpc event source, against agy-sim's server.

Every expectation comes from the scenario files (`scenario_answer`, `scenario_planners`); no test
measures time, and the deadlines given to turns or helpers only bound a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from live_helpers import AGY_VERSIONS
from live_helpers import TERMINAL
from live_helpers import Observed
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import final_text
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer
from live_helpers import scenario_chunks
from live_helpers import scenario_error
from live_helpers import scenario_planners
from live_helpers import terminal
from live_helpers import text_of

from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.rows import decode_step_row
from agy_provider.errors import AgyError
from agy_provider.hookspecs import hookimpl
from agy_provider.live.continuity import parse_mark
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.rpc.language_server import listening_ports
from agy_provider.sim.scenario import load_scenario

pytestmark = pytest.mark.slow


@pytest.fixture
def rpc_env(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "rpc")
    return live_env


# How long a held decision waits at most for its condition: it only bounds a hang.
HOLD_BOUND = 60.0


class Decisions:
    """A throwaway plugin deciding permissions and questions, remembering what it was asked.

    The first decision can be slow, like a person thinking: `delay` seconds, or until `until()`
    holds (checked every 20 ms; `gave_up` is set if it did not hold within HOLD_BOUND).
    `answered` lists the step indices it has returned an answer for.
    """

    def __init__(
        self,
        allow: bool = True,
        options: Sequence[str] = ("2",),
        delay: float = 0.0,
        until: Callable[[], bool] | None = None,
    ) -> None:
        self.allow, self.options, self.delay, self.until = allow, list(options), delay, until
        self.asked: list[int] = []
        self.first_asked = threading.Event()  # set by the hook's worker thread
        self.answered: list[int] = []
        self.gave_up = False

    def _think(self) -> None:
        # Hooks run in a worker thread: a slow person blocks nothing else.
        if len(self.asked) != 1:
            return
        if self.until is not None:
            bound = time.monotonic() + HOLD_BOUND
            while not self.until():
                if time.monotonic() > bound:
                    self.gave_up = True
                    return
                time.sleep(0.02)
        elif self.delay:
            time.sleep(self.delay)

    @hookimpl(tryfirst=True)
    def decide_permission(self, request: Any, step: Any, turn: Any) -> bool:
        self.asked.append(step.index)
        self.first_asked.set()
        self._think()
        self.answered.append(step.index)
        return self.allow

    @hookimpl(tryfirst=True)
    def answer_question(
        self, questions: Sequence[Any], step: Any, turn: Any
    ) -> list[Mapping[str, Any]]:
        self.asked.append(step.index)
        self.first_asked.set()
        self._think()
        self.answered.append(step.index)
        return [{"question": q.question, "selectedOptionIds": self.options} for q in questions]


MakeDecisions = Callable[..., Decisions]


@pytest.fixture
def decisions() -> Iterator[MakeDecisions]:
    pm = get_plugin_manager()

    def register(**kwargs: Any) -> Decisions:
        plugin = Decisions(**kwargs)
        pm.register(plugin, name="test-decisions")
        return plugin

    yield register
    if pm.has_plugin("test-decisions"):
        pm.unregister(name="test-decisions")


def coalesced(events: Sequence[AssistantMessageEvent]) -> list[Any]:
    """Events with consecutive deltas of one block merged and timestamps dropped: how two sources
    that observed the same growth at different moments are compared."""
    out: list[Any] = []
    for event in events:
        data = event.to_json(include_partial=False)
        for key in ("message", "error"):
            if isinstance(data.get(key), dict):
                data[key].pop("timestamp")
                # Each turn's mark names its own conversation: the same by construction.
                if parse_mark(data[key].pop("responseId", None)) is None and key == "message":
                    raise AssertionError(f"an unmarked {data['type']} message")
                for block in data[key]["content"]:
                    for field in ("textSignature", "thinkingSignature", "thoughtSignature"):
                        block.pop(field, None)
                # A quota's reset time is said as a clock time: the two turns ran moments apart.
                if data[key].get("errorMessage"):
                    data[key]["errorMessage"] = re.sub(
                        r"resets at \d{4}-\d\d-\d\d \d\d:\d\d UTC",
                        "resets at <time>",
                        data[key]["errorMessage"],
                    )
        if data["type"].endswith("_delta") and out and out[-1]["type"] == data["type"]:
            out[-1]["delta"] += data["delta"]
        else:
            out.append(data)
    return out


# Scenarios that end in an error event; the others end `done` with the scenario's answer.
FAILING = {"quota-error", "empty-answer"}


# Every scenario on the default agy (1.2.13), and a turn with agy's own tools on the older
# (1.1.17) and newest (1.3.3: FINISH steps, init before input) shapes.
@pytest.mark.parametrize(
    ("scenario", "version"),
    [
        *(
            (s, "1.2.13")
            for s in ("default", "thinking", "tools", "quota-error", "empty-answer", "two-turn")
        ),
        *(("tools", v) for v in AGY_VERSIONS if v != "1.2.13"),
    ],
)
async def test_both_sources_give_identical_events(
    rpc_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    scenario: str,
    version: str,
    recorder: Observed,
) -> None:
    monkeypatch.setenv("AGY_SIM_VERSION", version)
    monkeypatch.setenv("AGY_SIM_SCENARIO", scenario)
    by_source = {}
    for source in ("rpc", "sqlite"):
        monkeypatch.setenv("AGY_EVENT_SOURCE", source)
        if source == "sqlite":
            monkeypatch.setenv("AGY_SIM_NO_SERVER", "1")
        events, message = await run_turn("hello")
        if scenario == "quota-error":
            expect_error(events, message)
            assert scenario_error(scenario).user_message in (message.error_message or "")
        elif scenario in FAILING:
            expect_error(events, message)
        else:
            expect_done(events, message, scenario_answer(scenario))
        by_source[source] = coalesced(events)
    assert by_source["rpc"] == by_source["sqlite"]
    assert leftovers(rpc_env, recorder) == []


@pytest.mark.parametrize("source", ["rpc", "sqlite"])
async def test_a_corrupt_final_row_is_skipped_and_the_turn_goes_on(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, source: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The planner row grows healthily, then its final write is garbage: how much of the growth a
    # source saw depends on timing (some whole chunks of the first planner, maybe none), so the
    # answer is one of those prefixes followed by the second planner's whole text.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "corrupt-row")
    monkeypatch.setenv("AGY_EVENT_SOURCE", source)
    events, message = await run_turn("hello")
    first = scenario_chunks("corrupt-row")
    second = scenario_planners("corrupt-row")[1]
    possible = {"".join(first[:n]) + second for n in range(len(first) + 1)}
    streamed = text_of(events)  # what the host saw arrive
    assert streamed in possible, streamed
    # Ended `done`, delivering what it streamed (expect_done(…, streamed) compared the streamed
    # text with itself: only the delivered text can differ from it).
    last = terminal(events)
    assert isinstance(last, DoneEvent), f"ended {last.type}: {message.error_message}"
    assert final_text(message) == streamed
    # The corrupt write was met and skipped (without it, every check above holds as well).
    corrupt = load_scenario("corrupt-row").faults.corrupt_step
    assert any(f"step {corrupt} skipped" in r.getMessage() for r in caplog.records), caplog.text


def tool_lines(message: Any, tool: str) -> list[str]:
    """The thinking lines that summarize agy's runs of `tool`."""
    return [
        b.thinking for b in message.content if getattr(b, "thinking", "").startswith(f"▸ {tool}")
    ]


async def test_permission_allowed_runs_the_tool(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", patient(rpc_env.parent, "permission"))
    plugin = decisions(allow=True)
    events, message = await run_turn("where am I")
    expect_done(events, message, scenario_answer("permission"))
    assert plugin.answered  # the hook decided
    (tool,) = tool_lines(message, "run_command")
    assert "exit 0" in tool and "/tmp/project" in tool
    assert leftovers(rpc_env, recorder) == []


def sim_log(app: Path) -> str:
    return "".join(p.read_text() for p in (app / "log").glob("*.log"))


# How long agy-sim waits on an interaction in the `patient` copies: it only bounds a hang.
PATIENT_MS = 240_000


def patient(folder: Path, name: str) -> str:
    """A copy of built-in scenario `name` whose interactions wait PATIENT_MS instead of a few
    seconds: agy gives up on a prompt after a time of its own, and a busy machine must not turn
    that into a denial. Everything else (texts, tools, answers) is the scenario's own."""
    data = json.loads(
        resources.files("agy_provider.sim.scenarios").joinpath(f"{name}.json").read_text()
    )
    for turn in data["turns"]:
        for step in turn["steps"]:
            for tool in step.get("tools", []):
                if "permission" in tool:
                    tool["permission"]["timeout_ms"] = PATIENT_MS
    path = folder / f"{name}-patient.json"
    path.write_text(json.dumps(data))
    assert load_scenario(str(path)).turn(0) != load_scenario(name).turn(0)  # the copy differs
    return str(path)


async def test_permission_denied_fails_the_tool_and_the_model_follows_up(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", patient(rpc_env.parent, "permission"))
    plugin = decisions(allow=False)
    events, message = await run_turn("where am I")
    expect_done(events, message, scenario_answer("permission"))  # the model's follow-up
    (tool,) = tool_lines(message, "run_command")
    assert "denied" in tool
    # Answered over RPC at once, not left to agy's own prompt timeout.
    (index,) = plugin.answered
    assert f'interaction for step {index}: {{"permission": {{"allow": false}}}} -> ok' in sim_log(
        rpc_env
    )


async def test_question_answered_with_option_ids(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", patient(rpc_env.parent, "question"))
    decisions(options=["2"])
    events, message = await run_turn("help me")
    expect_done(events, message, scenario_answer("question"))
    (block,) = tool_lines(message, "ask_question")
    assert "Write a CLI tool" in block  # option 2's text


async def test_a_timed_out_and_reasked_interaction_is_answered_at_its_new_index(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "permission-reask")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    # A person who answers only after agy gave up on the first prompt (its row moved to ERROR,
    # after the scenario's 1.5 s) and asked again at a higher index.
    plugin: Decisions
    plugin = decisions(allow=True, until=lambda: step_status(rpc_env, plugin.asked[0]) == "error")
    events, message = await run_turn("where am I")
    assert not plugin.gave_up, "agy never timed out the first permission prompt"
    expect_done(events, message, scenario_answer("permission-reask"))
    assert len(set(plugin.asked)) >= 2 and max(plugin.asked) > min(plugin.asked)
    assert any("exit 0" in t for t in tool_lines(message, "run_command"))


def step_status(app: Path, index: int) -> str | None:
    """The status of step `index` in the (only) conversation of this test, read as agy wrote it."""
    for db in (app / "conversations").glob("*.db"):
        try:
            conn = open_conversation_db(db)
        except AgyError:
            return None  # not readable yet (agy holds it); ask again later
        try:
            for row in iter_step_rows(conn, after=index - 1, before=index + 1):
                return str(
                    decode_step_row(row.index, row.step_type, row.status, row.payload).status
                )
        except (AgyError, sqlite3.Error):
            return None
        finally:
            conn.close()
    return None


async def _stream_drop_trials(app: Path, trials: int) -> None:
    answer = scenario_answer("stream-drop")
    for trial in range(trials):
        events, message = await run_turn(f"trial {trial}")
        expect_done(events, message, answer)  # nothing lost, nothing doubled, every time
    # The fault really hit (at least) most turns.
    assert sim_log(app).count("stream fault: dropped") >= (trials + 1) // 2
    assert leftovers(app) == []


async def test_stream_dropped_mid_turn_loses_and_repeats_nothing(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "stream-drop")
    monkeypatch.setenv("AGY_SIM_SPEED", "8")
    await _stream_drop_trials(rpc_env, 3)


@pytest.mark.soak
async def test_stream_dropped_mid_turn_fifty_times(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "stream-drop")
    monkeypatch.setenv("AGY_SIM_SPEED", "8")
    await _stream_drop_trials(rpc_env, 50)


async def test_server_killed_mid_turn_under_auto_completes_from_the_database(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_EVENT_SOURCE", "auto")
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    killed: list[int] = []

    class Killer:
        @hookimpl
        def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
            if event.type == "thinking_delta" and not killed and turn.endpoint:
                for proc in turn.process.tree():
                    if "agy_provider.sim.server" in " ".join(proc.cmdline()):
                        proc.send_signal(signal.SIGKILL)
                        killed.append(proc.pid)

    pm = get_plugin_manager()
    pm.register(Killer(), name="test-killer")
    try:
        events, message = await run_turn("take your time")
    finally:
        pm.unregister(name="test-killer")
    assert killed
    expect_done(events, message, scenario_answer("slow"))  # all of it, once
    assert leftovers(rpc_env, recorder) == []


async def test_csrf_is_enforced_and_used(rpc_env: Path, recorder: Observed) -> None:
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer("default"))
    turn = recorder.turns[-1]
    assert any(a.startswith("--csrf_token=") for a in turn.process.argv)
    assert turn.endpoint
    # The server we bound refuses a call without the token: it really enforces CSRF.
    # (It is gone now, so start a fresh serving simulator with a token and ask it directly.)
    token = "abc123"
    env = {**os.environ, "AGY_SIM_SCENARIO": "default"}
    other = subprocess.Popen(
        [agy_sim_path(), f"--csrf_token={token}"], stdin=subprocess.DEVNULL, env=env
    )
    try:
        port = await _first_port(other.pid)
        async with httpx.AsyncClient(verify=False, trust_env=False, timeout=60) as http:
            url = f"https://127.0.0.1:{port}/exa.language_server_pb.LanguageServerService/Heartbeat"
            # Plain HTTP first: a TLS port refuses it at once, while a TLS hello sent to a plain
            # port can wait for the whole client timeout.
            for scheme_url in (url.replace("https", "http"), url):
                try:
                    bare = await http.post(
                        scheme_url, json={}, headers={"Connect-Protocol-Version": "1"}
                    )
                except httpx.HTTPError:
                    continue
                assert bare.status_code == 401 and "CSRF" in bare.json()["message"]
                good = await http.post(
                    scheme_url,
                    json={},
                    headers={"Connect-Protocol-Version": "1", "x-codeium-csrf-token": token},
                )
                assert good.status_code == 200
                break
            else:
                pytest.fail("no scheme answered")
    finally:
        other.terminate()
        other.wait(60)
    assert leftovers(rpc_env, recorder) == []


async def _first_port(pid: int) -> int:
    # A generous bound: it only stops a simulator that never listens from hanging the test.
    for _ in range(1200):
        root = psutil.Process(pid)
        ports = listening_ports([root, *root.children(recursive=True)])
        if len(ports) >= 2:
            return ports[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the simulator never listened")


async def test_another_agys_server_is_never_bound(rpc_env: Path, recorder: Observed) -> None:
    other = subprocess.Popen([agy_sim_path()], stdin=subprocess.DEVNULL, env=dict(os.environ))
    try:
        await _first_port(other.pid)
        root = psutil.Process(other.pid)
        theirs = set(listening_ports([root, *root.children(recursive=True)]))
        for trial in range(3):
            events, message = await run_turn(f"mine {trial}")
            expect_done(events, message, scenario_answer("default"))
            endpoint = recorder.turns[-1].endpoint
            assert endpoint and int(endpoint.rsplit(":", 1)[1]) not in theirs
    finally:
        other.terminate()
        other.wait(60)
    assert leftovers(rpc_env, recorder) == []


def test_coalescing_is_not_vacuous() -> None:
    import dataclasses
    import uuid

    from agy_provider.live.continuity import make_mark
    from agy_provider.pi.events import DoneEvent
    from agy_provider.pi.events import TextDeltaEvent
    from agy_provider.pi.types import AssistantMessage
    from agy_provider.pi.types import TextContent

    partial = AssistantMessage(
        content=(), api="agy", provider="agy", model="m", stop_reason="stop", timestamp=0
    )
    a = [TextDeltaEvent(content_index=0, delta="ab", partial=partial)]
    b = [
        TextDeltaEvent(content_index=0, delta="a", partial=partial),
        TextDeltaEvent(content_index=0, delta="c", partial=partial),
    ]
    same = [
        TextDeltaEvent(content_index=0, delta="a", partial=partial),
        TextDeltaEvent(content_index=0, delta="b", partial=partial),
    ]
    assert coalesced(same) == coalesced(a)  # the same growth, chunked otherwise, compares equal
    assert coalesced(a) != coalesced(b)  # and other text does not
    assert [event["delta"] for event in coalesced(b)] == ["ac"]  # consecutive deltas merged
    # What differs between two turns of the same answer is dropped (the message's time, the mark
    # naming each turn's own conversation); everything else is kept and compared. (This line
    # asserted json.loads(json.dumps(x)) == x, true of any JSON value.)
    def done(text: str, timestamp: int, conversation: str) -> list[Any]:
        answer = dataclasses.replace(
            partial,
            content=(TextContent(text=text),),
            timestamp=timestamp,
            response_id=make_mark(conversation, uuid.uuid4().hex),
        )
        return [DoneEvent(reason="stop", message=answer)]

    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    assert coalesced(done("hi", 1, mine)) == coalesced(done("hi", 2, theirs))
    assert coalesced(done("hi", 1, mine)) != coalesced(done("ho", 1, mine))
    assert coalesced(done("hi", 1, mine))[0]["message"]["content"] == [
        {"type": "text", "text": "hi"}
    ]


@pytest.mark.parametrize("scenario", ["split-frames", "malformed-frames"])
async def test_split_and_malformed_frames_stream_the_same_answer(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", scenario)
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer(scenario))


async def test_abort_while_agy_waits_cancels_refuses_and_leaves_nothing(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", patient(rpc_env.parent, "permission"))
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    # A person who answers only once the turn has ended: if the abort waited for them, they would
    # give up after HOLD_BOUND and the turn would end only then.
    plugin = decisions(
        allow=True, until=lambda: any(e.type in TERMINAL for e, _ in recorder.events)
    )
    signal = AbortSignal()

    async def abort_while_asked() -> None:
        # agy waits on the permission and the person is being asked.
        asked = await asyncio.to_thread(plugin.first_asked.wait, HOLD_BOUND)
        assert asked, "agy never asked for the permission"
        signal.abort("host aborted")

    task = asyncio.create_task(abort_while_asked())
    events, message = await run_turn("where am I", signal=signal)
    await task
    expect_error(events, message, "aborted")
    assert not plugin.gave_up, "the abort waited for the person's answer"
    assert leftovers(rpc_env, recorder) == []
    log = sim_log(rpc_env)
    assert "cancel requested for conversation" in log  # CancelCascadeSteps reached agy
    assert '{"permission": {"allow": false}}' in log  # and the WAITING step was refused


async def test_a_slow_decision_is_not_mistaken_for_a_hung_agy(
    rpc_env: Path, monkeypatch: pytest.MonkeyPatch, decisions: MakeDecisions
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", patient(rpc_env.parent, "permission"))
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    monkeypatch.setenv("AGY_IDLE_TIMEOUT", "1.5")
    plugin = decisions(allow=True, delay=3.0)  # a person takes twice the idle deadline to answer
    events, message = await run_turn("where am I")
    expect_done(events, message, scenario_answer("permission"))
    assert plugin.answered
    (tool,) = tool_lines(message, "run_command")
    assert "exit 0" in tool
