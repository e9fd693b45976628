"""Regression tests from a review of the live engine: each failed before its fix.

Fakes of the turn's edges come from `test_turn_driver`; sources are the real ones against real
databases (the simulator's writer) or a scripted server transport. No wall-clock assertions.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from agy_provider.plugins.rpc_source import RpcEventSource
from agy_provider.plugins.sqlite_source import SqliteEventSource
from fakes import CONVERSATION
from fakes import HANG
from fakes import Script
from fakes import collect
from fakes import edges_for
from fakes import planner
from fakes import start_turn
from fakes import until
from fakes import user
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import run_turn
from live_helpers import scenario_answer

from agy_provider.agy.step import StepStatus
from agy_provider.errors import RpcError
from agy_provider.errors import TurnError
from agy_provider.hookspecs import hookimpl
from agy_provider.live.discovery import Binding
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.runner import AgyProcess
from agy_provider.live.runner import TurnRequest
from agy_provider.live.turn import TurnContext
from agy_provider.live.turn import history_digest
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import event_sources
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.rpc.client import ConnectClient
from agy_provider.rpc.language_server import prove_ownership
from agy_provider.sim import descriptors as pb
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.bulk import write_conversation
from agy_provider.store.config import Config
from agy_provider.store.sessions import SessionRecord

# -- an observer that raises must not cost the host its final event -------------------------


class _BrokenObserver:
    """A third-party `observe_event` with a bug: raises on one kind of event."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
        if event.type == self.kind:
            raise RuntimeError(f"observer bug on {event.type}")


async def test_an_observer_that_raises_never_costs_the_final_event(tmp_path: Path) -> None:
    pm = get_plugin_manager()
    pm.register(_BrokenObserver("text_end"), name="test-broken-observer")
    try:
        script = Script()
        stream = start_turn(edges_for(script, tmp_path))
        await until(lambda: script.sources)
        script.sources[0].enqueue([user(0), planner(1, "Hello", StepStatus.GENERATING)])
        await until(lambda: not script.sources[0].queue)
        script.processes[0].exit(0)
        events = await collect(stream)  # hung forever before: `done` was never pushed
        assert isinstance(events[-1], (DoneEvent, ErrorEvent))
        assert sum(isinstance(e, (DoneEvent, ErrorEvent)) for e in events) == 1
        await wait_for_turns()
    finally:
        pm.unregister(name="test-broken-observer")


# -- the sqlite source: a cancelled poll must not lose what it read -------------------------


async def test_a_cancelled_sqlite_poll_keeps_its_rows_for_the_next_one(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    answer = writer.append(planner_step("what agy wrote before the abort", ""))
    source = SqliteEventSource(db, min_index=STEPS_PER_TURN - 1)
    await source.open()
    try:
        polling = asyncio.ensure_future(source.poll())
        await asyncio.sleep(0)  # the read is in its worker thread now
        polling.cancel()  # an abort lands while the read runs
        await asyncio.gather(polling, return_exceptions=True)
        # The abort's last read (forced): it must still see the row the cancelled read took.
        steps = await asyncio.wait_for(source.poll(force=True), HANG)
        assert [s.index for s in steps] == [answer]
        assert steps[0].text == "what agy wrote before the abort"
    finally:
        await source.aclose()
        writer.close()


# -- the rpc source: agy's frames of an unexpected shape are skipped, never fatal -----------


def _rpc_source() -> RpcEventSource:
    turn = TurnContext(
        session_id="",
        prompt="hi",
        cwd=".",
        config=Config(),
        event_source="rpc",
        permissions="default",
        binding=Binding(path=Path("unused.db"), conversation_id=str(uuid.uuid4())),
    )
    return RpcEventSource(turn)


def test_an_update_frame_of_another_shape_is_skipped() -> None:
    source = _rpc_source()
    for frame in (
        {"update": ["not", "an", "object"]},
        {"update": {"mainTrajectoryUpdate": "text"}},
        {"update": {"mainTrajectoryUpdate": {"stepsUpdate": 7}}},
        {"update": {"mainTrajectoryUpdate": {"stepsUpdate": {"steps": 7, "indices": 3}}}},
    ):
        source._take_update(frame)  # raised AttributeError/TypeError, killing the stream task
    assert source._latest == {}


async def test_a_snapshot_whose_steps_are_no_list_is_a_source_failure() -> None:
    # A TypeError here escaped `open()` (the turn failed "unexpectedly" instead of reading the
    # database) and killed the stream task silently.
    source = _rpc_source()
    source.client = ConnectClient(
        "http://127.0.0.1:1",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"steps": 5})),
    )
    try:
        with pytest.raises(RpcError):
            await source._reconcile()
    finally:
        await source.aclose()


async def test_closing_the_rpc_source_does_not_swallow_the_callers_cancellation() -> None:
    source = _rpc_source()
    release = asyncio.Event()

    async def slow_to_stop() -> None:  # a stream whose connection takes a moment to close
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()
            raise

    source._spawn(slow_to_stop())
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(source.aclose())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    closing.cancel()  # the host's abort, while the source is closing
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait({closing}, timeout=HANG)
    assert closing.cancelled()  # before: aclose returned normally, the abort was lost


# -- sessions: a late save of an earlier turn never overwrites a newer turn's record ----------


async def test_an_earlier_turns_late_version_save_keeps_the_newer_record(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    asked = 0
    version_known = asyncio.Event()

    async def version(binary: str) -> str:  # a first run: agy's version takes a while to learn
        nonlocal asked
        asked += 1
        if asked == 1:
            await version_known.wait()
        return "1.2.13"

    edges.version = version
    first = start_turn(edges, session="s", prompt="one")
    await until(lambda: script.sources)
    script.sources[0].enqueue([user(0, "one"), planner(1, "One.")])
    await until(lambda: not script.sources[0].queue)
    script.processes[0].exit(0)
    done = (await collect(first))[-1]
    assert isinstance(done, DoneEvent)
    # The host goes on at once; the first turn is still waiting for agy's version.
    history: list[Any] = [UserMessage(content="one", timestamp=0), done.message]
    second = start_turn(edges, session="s", prompt="two", history=history)
    await until(lambda: len(script.sources) == 2)
    assert script.processes[1].request.conversation_id == CONVERSATION  # it resumed
    script.sources[1].enqueue([user(2, "two"), planner(3, "Two.")])
    await until(lambda: not script.sources[1].queue)
    script.processes[1].exit(0)
    done_two = (await collect(second))[-1]
    assert isinstance(done_two, DoneEvent)
    await until(lambda: (edges.store.get("s") or SessionRecord("")).last_step_index == 3)
    version_known.set()  # now the first turn saves its record again, with the version
    await wait_for_turns()
    record = edges.store.get("s")
    assert record is not None and record.last_step_index == 3  # was 1: turn two forgotten
    newest = [*history, UserMessage(content="two", timestamp=0), done_two.message]
    assert record.history_digest == history_digest(newest)


# -- sessions: a turn that never reached agy's conversation leaves the session as it was ------


async def test_a_turn_agy_refused_before_its_user_step_keeps_the_session_resumable(
    tmp_path: Path,
) -> None:
    script = Script(stderr="Error: quota exhausted")
    edges = edges_for(script, tmp_path)
    earlier: list[Any] = [UserMessage(content="one", timestamp=0)]
    edges.store.put(
        "s", SessionRecord(CONVERSATION, last_step_index=1, history_digest=history_digest(earlier))
    )
    first = start_turn(edges, session="s", prompt="two", history=earlier)
    await until(lambda: script.sources)
    script.processes[0].exit(1)  # agy refused the turn: no step of it was ever written
    assert isinstance((await collect(first))[-1], ErrorEvent)
    await wait_for_turns()
    # The host retries the same question: it must still resume the conversation (before, the
    # record claimed "two" was in it, the digest no longer matched, and a new one started).
    retry = start_turn(edges, session="s", prompt="two", history=earlier)
    await until(lambda: len(script.processes) == 2)
    assert script.processes[1].request.conversation_id == CONVERSATION
    assert script.processes[1].request.prompt == "two"
    script.processes[1].exit(0)
    await collect(retry)
    await wait_for_turns()


# -- the hand-over at agy's exit: the source the turn leaves is closed too ---------------------


async def test_the_rpc_source_left_for_the_final_drain_is_closed(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path, names=("rpc", "sqlite"))
    stream = start_turn(edges)
    await until(lambda: len(script.sources) == 2)
    rpc, backup = script.sources
    assert (rpc.name, backup.name) == ("rpc", "sqlite")
    rpc.enqueue([user(0), planner(1, "streamed over rpc")])  # the pump moved to rpc
    await until(lambda: not rpc.queue)
    script.processes[0].exit(0)  # agy exits: the database gives the last word
    assert isinstance((await collect(stream))[-1], DoneEvent)
    await wait_for_turns()
    assert backup.closed
    assert rpc.closed  # was left open: its stream task and HTTP client lived on


# -- a relative state folder names the same folder for agy (in the turn's cwd) and for us ------


@pytest.mark.slow
async def test_a_relative_state_folder_binds_when_the_turn_runs_elsewhere(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGY_APP_DATA_DIR", "relative-state")  # as a user may write it
    monkeypatch.setenv("ANTIGRAVITY_APP_DATA_DIR", "relative-state")
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    events, message = await run_turn("hello", cwd=str(elsewhere))
    # Before: agy wrote under project/relative-state, the turn watched ./relative-state and
    # failed ("conversation …'s database did not appear").
    expect_done(events, message, scenario_answer("default"))
    assert list((tmp_path / "relative-state" / "conversations").glob("*.db"))


# -- a missing working folder is named, not mistaken for a missing agy -------------------------


async def test_a_missing_working_folder_is_named_when_agy_cannot_start(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    process = AgyProcess(TurnRequest(prompt="hi", cwd=str(missing), agy_bin=agy_sim_path()))
    with pytest.raises(TurnError) as failure:
        await process.start()
    # Before: "could not start …/agy-sim: No such file or directory", as if agy were missing.
    assert str(missing) in str(failure.value)


async def test_an_ownership_answer_of_another_shape_is_a_refusal_not_a_crash() -> None:
    conversation = str(uuid.uuid4())
    client = ConnectClient(
        "http://127.0.0.1:1",
        transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json={"metadata": [conversation]})
        ),
    )
    try:
        # Before: AttributeError escaped `open()`, failing the turn instead of handing over.
        with pytest.raises(TurnError):
            await prove_ownership(client, conversation)
    finally:
        await client.aclose()


# -- sessions: a turn after an abort that left a row GENERATING is recorded, and not held back --


def _user_step(text: str) -> Any:
    step = pb.Step()
    step.type = pb.STEP_TYPE["CORTEX_STEP_TYPE_USER_INPUT"]
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.user_input.user_response = text
    step.user_input.items.add().text = text
    return step


async def test_a_turn_after_an_abort_that_left_a_row_generating_is_recorded(
    tmp_path: Path,
) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    # The real database reader, on a database written the way agy writes it.
    edges.sources = lambda: {"sqlite": event_sources()["sqlite"]}
    folder = tmp_path / "agy" / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CONVERSATION}.db").unlink(missing_ok=True)
    writer = write_conversation(folder / f"{CONVERSATION}.db", CONVERSATION, turns=1)
    earlier: list[Any] = [UserMessage(content="request 0", timestamp=0)]
    edges.store.put(
        "s",
        SessionRecord(
            CONVERSATION,
            last_step_index=STEPS_PER_TURN - 1,
            history_digest=history_digest(earlier),
        ),
    )
    try:
        # Turn two is aborted while agy generates; agy dies with its row still GENERATING.
        signal = AbortSignal()
        second = start_turn(edges, session="s", prompt="two", history=earlier, signal=signal)
        await until(lambda: script.processes)
        writer.append(_user_step("two"))
        writer.append(planner_step("partial", status="CORTEX_STEP_STATUS_GENERATING"))
        seen: list[AssistantMessageEvent] = []

        async def until_partial() -> None:
            async for event in second:
                seen.append(event)
                if event.type == "text_delta":
                    return

        await asyncio.wait_for(until_partial(), HANG)
        signal.abort()
        seen.extend(await collect(second))
        assert isinstance(seen[-1], ErrorEvent) and seen[-1].reason == "aborted"
        await wait_for_turns()
        # Turn three resumes (the host kept the question, dropped the aborted answer).
        history = [*earlier, UserMessage(content="two", timestamp=0)]
        third = start_turn(edges, session="s", prompt="three", history=history)
        await until(lambda: len(script.processes) == 2)
        assert script.processes[1].request.conversation_id == CONVERSATION
        writer.append(_user_step("three"))
        last = writer.append(planner_step("Three."))
        script.processes[1].exit(0)
        done = (await collect(third))[-1]
        assert isinstance(done, DoneEvent)
        await wait_for_turns()
        record = edges.store.get("s")
        # The record says the conversation now holds turn three (else the host's next turn
        # starts a new conversation), and the dead turn's GENERATING row no longer holds
        # last_step_index back (once it did, and every resume re-read the rows since the abort).
        assert record is not None and record.conversation_id == CONVERSATION
        assert record.history_digest == history_digest(
            [*history, UserMessage(content="three", timestamp=0), done.message]
        )
        assert record.last_step_index == last
    finally:
        writer.close()
