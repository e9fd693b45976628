"""Issue 4's acceptance: live turns through the sqlite event source, against agy-sim.

Every expectation comes from the scenario files (`scenario_answer`, `scenario_error`); no test
measures time, and the deadlines given to turns only bound a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from live_helpers import AGY_VERSIONS
from live_helpers import MODEL
from live_helpers import Observed
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer
from live_helpers import scenario_error
from live_helpers import scenario_planners
from live_helpers import terminal
from live_helpers import text_of

from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.store.sessions import SessionStore

pytestmark = pytest.mark.slow

DEFAULT_ANSWER = scenario_answer("default")


def user_texts(db: Path) -> list[str]:
    conn = open_conversation_db(db)
    try:
        return [
            s.text
            for s in (
                decode_step_row(r.index, r.step_type, r.status, r.payload)
                for r in iter_step_rows(conn)
            )
            if s.kind is StepKind.USER
        ]
    finally:
        conn.close()


def _user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=0)


def test_the_scenario_expectations_are_not_vacuous() -> None:
    assert DEFAULT_ANSWER.startswith("Hello! I'm Antigravity") and DEFAULT_ANSWER.endswith("today?")
    assert scenario_answer("two-turn", 0) == "One." and scenario_answer("two-turn", 1) == "Two."
    assert scenario_answer("subagent") == "The subagent reports three packages."
    assert "RESOURCE_EXHAUSTED" in scenario_error("quota-error").short_error


async def test_text_streams_while_agy_is_still_running(
    live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `slow` leaves 350 ms (at speed 2) between text chunks, and agy exits only after the last:
    # deltas seen while agy runs prove the source streams rather than reading the end result.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "2")
    events, message = await run_turn("hello there")
    expect_done(events, message, scenario_answer("slow"))
    kinds = [e.type for e in events]
    assert kinds.index("thinking_start") < kinds.index("text_start")
    running = [alive for event, alive in recorder.events if event.type == "text_delta"]
    assert len(running) >= 2 and any(running)
    assert message.usage.input > 0 and message.usage.total_tokens > message.usage.input
    assert leftovers(live_env, recorder) == []


@pytest.mark.parametrize("version", AGY_VERSIONS)
async def test_two_turn_session_resumes_and_streams_only_the_new_turn(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setenv("AGY_SIM_VERSION", version)
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    store = SessionStore()
    first_events, first = await run_turn("count with me", session="host-1", store=store)
    expect_done(first_events, first, scenario_answer("two-turn", 0))
    record = store.get("host-1")
    assert record is not None
    second_events, second = await run_turn(
        "next", session="host-1", store=store, history=[_user("count with me"), first]
    )
    expect_done(second_events, second, scenario_answer("two-turn", 1))
    resumed = store.get("host-1")
    assert resumed is not None and resumed.conversation_id == record.conversation_id
    dbs = list((live_env / "conversations").glob("*.db"))
    assert [p.stem for p in dbs] == [record.conversation_id]
    assert user_texts(dbs[0]) == ["count with me", "next"]  # only the newest message was sent
    assert leftovers(live_env) == []


async def test_diverged_history_starts_a_new_conversation_with_a_preamble(live_env: Path) -> None:
    store = SessionStore()
    _, first = await run_turn("hello there", session="host-2", store=store)
    record = store.get("host-2")
    assert record is not None
    # The host edited its history: agy's conversation no longer matches it.
    events, message = await run_turn(
        "again", session="host-2", store=store, history=[_user("something else"), first]
    )
    expect_done(events, message, DEFAULT_ANSWER)
    new = store.get("host-2")
    assert new is not None and new.conversation_id != record.conversation_id
    texts = user_texts(live_env / "conversations" / f"{new.conversation_id}.db")
    assert texts[0].startswith("<conversation>\n<user>\nsomething else\n</user>")
    assert texts[0].endswith("\n\nagain")


async def test_abort_at_random_moments(
    live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `hang` streams a partial answer and then never finishes, so however slow the machine, every
    # abort lands in a running turn: during spawn, cold start, binding, streaming or the silence.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    rng = random.Random(4)
    store = SessionStore()
    # How long this machine takes to a turn's first text (a loaded one takes many times an idle
    # one's): the aborts below are spread over that much and more, so they land in several
    # phases wherever the suite runs. Only a range for the random moments, never an assertion.
    span = max(0.8, 1.5 * await _seconds_to_first_text(store))
    phases = set()
    for trial in range(12):
        signal = AbortSignal()
        delay = rng.uniform(0.0, span)
        seen_before = len(recorder.events)

        async def abort_later(signal: AbortSignal = signal, delay: float = delay) -> None:
            await asyncio.sleep(delay)
            signal.abort("test")

        task = asyncio.create_task(abort_later())
        events, message = await run_turn(
            f"trial {trial}", session=f"abort-{trial}", signal=signal, store=store
        )
        await task
        expect_error(events, message, "aborted")
        # Whatever was streamed before the abort is a prefix of the scenario's answer.
        assert scenario_answer("hang").startswith(text_of(events)), trial
        before_abort = [e.type for e, _ in recorder.events[seen_before:]][:-1]
        phases.add(before_abort[-1] if before_abort else "nothing yet")
        assert leftovers(live_env, recorder) == [], f"trial {trial} (abort after {delay:.2f}s)"
    assert len(phases) >= 2, f"every abort landed in the same phase: {phases}"
    # The store is consistent: valid JSON, every record loads.
    data = (
        json.loads(Path(store.path).read_text()) if Path(store.path).exists() else {"sessions": {}}
    )
    assert set(data["sessions"]) == set(store.all())


async def _seconds_to_first_text(store: SessionStore) -> float:
    """Seconds from `stream_simple` to the hang scenario's first text delta (the turn is then
    aborted and waited for)."""
    signal = AbortSignal()
    started = time.monotonic()
    first = 0.0
    stream = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="how long to the first text?", timestamp=0)]),
        SimpleStreamOptions(session_id="abort-calibration", signal=signal),
        store=store,
    )
    async for event in stream:
        if not first and event.type == "text_delta":
            first = time.monotonic() - started
            signal.abort("measured")
    await stream.result()
    await wait_for_turns()
    return first


async def test_crash_mid_turn_reports_agys_stderr(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    # agy crashes after the first planner's row is complete: its whole text is delivered, then
    # the error carrying agy's panic.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "crash")
    events, message = await run_turn("hello")
    expect_error(events, message)
    assert "exited with code 2" in (message.error_message or "")
    assert "panic" in (message.error_message or "").lower()
    assert text_of(events) == scenario_planners("crash")[0]
    assert leftovers(live_env, recorder) == []


async def test_hang_hits_the_idle_deadline(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    monkeypatch.setenv("AGY_IDLE_TIMEOUT", "1.5")
    events, message = await run_turn("hello")
    expect_error(events, message)
    assert "idle deadline" in (message.error_message or "")
    assert text_of(events) == scenario_planners("hang")[0]  # everything before the hang
    assert leftovers(live_env, recorder) == []


async def test_locked_database_still_completes_exactly(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "locked")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")  # keep the real 1.5 s lock
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer("locked"))


@pytest.mark.parametrize("version", AGY_VERSIONS)
async def test_quota_error_ends_with_agys_message(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    from agy_provider.agy.quota import quota_of

    monkeypatch.setenv("AGY_SIM_VERSION", version)
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    events, message = await run_turn("hello")
    expect_error(events, message)
    error = message.error_message or ""
    assert scenario_error("quota-error").user_message in error  # "… reset after 2h13m5s."
    assert "Traceback" not in error and "goroutine" not in error
    quota = quota_of(message)
    assert quota is not None and quota.resets_in == 2 * 3600 + 13 * 60 + 5
    if version == "1.3.3":  # exit 3: agy's AGY_ERROR line is the error, not the exit code
        assert error.startswith("agy failed: RESOURCE_EXHAUSTED (code 429): ")
    assert text_of(events) == ""
    assert leftovers(live_env) == []


async def test_agys_error_line_is_the_error_when_stderr_is_read_after_the_result(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A warm turn ends on agy's `result`; agy 1.3.x's AGY_ERROR line follows it on the other pipe,
    # which a busy machine may read later: the error is still that line, every time.
    monkeypatch.setenv("AGY_SIM_VERSION", "1.3.3")
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    monkeypatch.setenv("AGY_SIM_STDERR_LAG_MS", "1200")  # 300 ms at AGY_SIM_SPEED 4
    events, message = await run_turn("hello")
    expect_error(events, message)
    error = message.error_message or ""
    assert error.startswith("agy failed: RESOURCE_EXHAUSTED (code 429): "), error
    assert scenario_error("quota-error").user_message in error


async def test_ten_concurrent_turns_and_a_subagent_each_bind_their_own(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Observed
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "subagent")
    store = SessionStore()
    results = await asyncio.gather(
        *(run_turn(f"concurrent prompt {n}", session=f"c{n}", store=store) for n in range(10))
    )
    ids = set()
    for n, (events, message) in enumerate(results):
        expect_done(events, message, scenario_answer("subagent"))
        record = store.get(f"c{n}")
        assert record is not None
        ids.add(record.conversation_id)
        db = live_env / "conversations" / f"{record.conversation_id}.db"
        assert user_texts(db) == [f"concurrent prompt {n}"]
    assert len(ids) == 10
    assert len(list((live_env / "conversations").glob("*.db"))) == 20  # ten subagent databases too
    assert leftovers(live_env, recorder) == []


async def test_a_prompt_too_large_for_argv_goes_through_stdin(live_env: Path) -> None:
    prompt = "Summarise this: " + "lorem ipsum " * 12_000  # ~140 KiB, over Linux's 128 KiB argv cap
    events, message = await run_turn(prompt)
    expect_done(events, message, DEFAULT_ANSWER)
    (db,) = (live_env / "conversations").glob("*.db")
    assert user_texts(db) == [prompt]


async def test_a_prompt_that_looks_like_a_flag_is_sent_as_is(live_env: Path) -> None:
    events, message = await run_turn("--help me")
    expect_done(events, message, DEFAULT_ANSWER)
    (db,) = (live_env / "conversations").glob("*.db")
    assert user_texts(db) == ["--help me"]


def test_expectations_can_fail() -> None:
    """The checks above reject a wrong answer, a missing or doubled terminal event."""
    from agy_provider.pi.events import DoneEvent
    from agy_provider.pi.events import TextDeltaEvent
    from agy_provider.pi.types import AssistantMessage
    from agy_provider.pi.types import TextContent

    message = AssistantMessage(
        content=(TextContent(text="One."),), api="agy", provider="agy", model="m",
        stop_reason="stop", timestamp=0,
    )  # fmt: skip
    delta = TextDeltaEvent(content_index=0, delta="One.", partial=message)
    done = DoneEvent(reason="stop", message=message)
    expect_done([delta, done], message, "One.")
    with pytest.raises(AssertionError):
        expect_done([delta, done], message, "Two.")
    with pytest.raises(AssertionError):
        terminal([delta])
    with pytest.raises(AssertionError):
        terminal([delta, done, done])
    with pytest.raises(AssertionError):
        terminal([done, delta])


async def test_leftovers_names_a_process_of_this_state_folder(live_env: Path) -> None:
    """The leftover check is not vacuous: a live agy-sim of this state folder is reported."""
    env = {**os.environ, "AGY_SIM_SCENARIO": "hang"}
    proc = subprocess.Popen(
        [agy_sim_path(), "-p", "hello"], stdin=subprocess.DEVNULL, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Until the child has exec'd agy-sim, /proc shows a copy of pytest (its command line and
        # its starting environment, without this test's state folder): look until it shows up.
        deadline = time.monotonic() + 30
        while not any(line.startswith(f"{proc.pid} ") for line in leftovers(live_env)):
            assert proc.poll() is None and time.monotonic() < deadline, "agy-sim was not reported"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait(30)
    assert leftovers(live_env) == []


async def test_the_stream_tells_its_caller_the_turns_facts(live_env: Path) -> None:
    # The caller of stream_simple learns the conversation, agy's exit code, the answering model
    # and the source from the stream itself: no hook needed.
    stream = stream_simple(MODEL, Context(messages=[_user("hi")]), SimpleStreamOptions())
    assert stream.facts.conversation_id == ""  # nothing known before the turn ends
    message = await stream.result()
    await wait_for_turns()
    dbs = list((live_env / "conversations").glob("*.db"))
    assert [p.stem for p in dbs] == [stream.facts.conversation_id]
    assert stream.facts.exit_code == 0 and stream.facts.source == "sqlite"
    assert stream.facts.model == message.model != ""
