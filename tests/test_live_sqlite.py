"""Issue 4's acceptance: live turns through the sqlite event source, against agy-sim."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from live_helpers import agy_processes, run_turn, text_of

from agy_provider.agy.database import iter_step_rows, open_conversation_db
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.events import DoneEvent, ErrorEvent
from agy_provider.options import AbortSignal
from agy_provider.sessions import SessionStore

pytestmark = pytest.mark.slow

DEFAULT_ANSWER = (
    "Hello! I'm Antigravity, your AI coding assistant. I can read your code, run commands "
    "and make edits — what shall we build today?"
)


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


async def test_text_streams_while_agy_is_still_running(live_env: Path, recorder: Any) -> None:
    events, message = await run_turn("hello there")
    assert isinstance(events[-1], DoneEvent)
    assert text_of(events) == DEFAULT_ANSWER == message.content[-1].text
    kinds = [e.type for e in events]
    assert kinds.index("thinking_start") < kinds.index("text_start")
    # Deltas were produced while agy was still running (placeholder row and in-place growth).
    running = [alive for event, alive in recorder.events if event.type == "text_delta"]
    assert len(running) >= 2 and any(running)
    assert message.usage.input > 0 and message.usage.total_tokens > message.usage.input


async def test_two_turn_session_resumes_and_streams_only_the_new_turn(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    store = SessionStore()
    first_events, first = await run_turn("count with me", session="host-1", store=store)
    assert text_of(first_events) == "One."
    record = store.get("host-1")
    assert record is not None
    second_events, _ = await run_turn(
        "next", session="host-1", store=store, history=[_user("count with me"), first]
    )
    assert text_of(second_events) == "Two."
    assert store.get("host-1").conversation_id == record.conversation_id  # type: ignore[union-attr]
    dbs = list((live_env / "conversations").glob("*.db"))
    assert [p.stem for p in dbs] == [record.conversation_id]
    assert user_texts(dbs[0]) == ["count with me", "next"]  # only the newest message was sent


def _user(text: str) -> Any:
    from agy_provider.types import UserMessage

    return UserMessage(content=text, timestamp=0)


async def test_diverged_history_starts_a_new_conversation_with_a_preamble(live_env: Path) -> None:
    store = SessionStore()
    _, first = await run_turn("hello there", session="host-2", store=store)
    record = store.get("host-2")
    assert record is not None
    # The host edited its history: agy's conversation no longer matches it.
    events, _ = await run_turn(
        "again", session="host-2", store=store, history=[_user("something else"), first]
    )
    assert isinstance(events[-1], DoneEvent)
    new = store.get("host-2")
    assert new is not None and new.conversation_id != record.conversation_id
    texts = user_texts(live_env / "conversations" / f"{new.conversation_id}.db")
    assert texts[0].startswith("<conversation>\n<user>\nsomething else\n</user>")
    assert texts[0].endswith("\n\nagain")


async def test_abort_at_random_moments(live_env: Path, recorder: Any) -> None:
    rng = random.Random(4)
    store = SessionStore()
    for trial in range(20):
        signal = AbortSignal()
        delay = rng.uniform(0.0, 0.6)

        async def abort_later(signal: AbortSignal = signal, delay: float = delay) -> None:
            await asyncio.sleep(delay)
            signal.abort("test")

        task = asyncio.create_task(abort_later())
        events, message = await run_turn(
            f"trial {trial}", session=f"abort-{trial}", signal=signal, store=store
        )
        await task
        last = events[-1]
        assert isinstance(last, ErrorEvent), (
            f"trial {trial} (abort after {delay:.2f}s) ended {last.type}"
        )
        assert last.reason == "aborted" and message.stop_reason == "aborted"
        assert sum(e.type == "error" for e in events) == 1
        turn = recorder.turns[-1]
        if turn.process is not None:
            assert turn.process.survivors() == []
    assert agy_processes(live_env) == []
    # The store is consistent: valid JSON, every record loads.
    data = (
        json.loads(Path(store.path).read_text()) if Path(store.path).exists() else {"sessions": {}}
    )
    assert set(data["sessions"]) == set(store.all())


async def test_crash_mid_turn_reports_agys_stderr(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "crash")
    events, message = await run_turn("hello")
    assert isinstance(events[-1], ErrorEvent)
    assert "exited with code" in (message.error_message or "")
    assert "panic" in (message.error_message or "").lower()
    assert agy_processes(live_env) == []


async def test_hang_hits_the_idle_deadline(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "hang")
    monkeypatch.setenv("AGY_IDLE_TIMEOUT", "1.5")
    events, message = await run_turn("hello")
    assert isinstance(events[-1], ErrorEvent)
    assert "idle deadline" in (message.error_message or "")
    assert text_of(events).startswith("Partial answer")
    assert agy_processes(live_env) == []


async def test_locked_database_still_completes_exactly(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "locked")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")  # keep the real 1.5 s lock
    events, _ = await run_turn("hello")
    assert isinstance(events[-1], DoneEvent)
    assert text_of(events) == DEFAULT_ANSWER


async def test_quota_error_ends_with_agys_message(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    events, message = await run_turn("hello")
    assert isinstance(events[-1], ErrorEvent)
    assert (
        "RESOURCE_EXHAUSTED" in (message.error_message or "")
        or "quota" in (message.error_message or "").lower()
    )


async def test_ten_concurrent_turns_and_a_subagent_each_bind_their_own(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "subagent")
    store = SessionStore()
    results = await asyncio.gather(
        *(run_turn(f"concurrent prompt {n}", session=f"c{n}", store=store) for n in range(10))
    )
    ids = set()
    for n, (events, _message) in enumerate(results):
        assert isinstance(events[-1], DoneEvent), events[-1]
        record = store.get(f"c{n}")
        assert record is not None
        ids.add(record.conversation_id)
        db = live_env / "conversations" / f"{record.conversation_id}.db"
        assert user_texts(db) == [f"concurrent prompt {n}"]
    assert len(ids) == 10
    assert len(list((live_env / "conversations").glob("*.db"))) == 20  # ten subagent databases too


async def test_a_prompt_too_large_for_argv_goes_through_stdin(live_env: Path) -> None:
    prompt = "Summarise this: " + "lorem ipsum " * 12_000  # ~140 KiB, over Linux's 128 KiB argv cap
    events, _ = await run_turn(prompt)
    assert isinstance(events[-1], DoneEvent)
    assert text_of(events) == DEFAULT_ANSWER
    (db,) = (live_env / "conversations").glob("*.db")
    assert user_texts(db) == [prompt]


async def test_a_prompt_that_looks_like_a_flag_is_sent_as_is(live_env: Path) -> None:
    events, _ = await run_turn("--help me")
    assert isinstance(events[-1], DoneEvent)
    (db,) = (live_env / "conversations").glob("*.db")
    assert user_texts(db) == ["--help me"]
