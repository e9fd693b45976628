"""The turn driver's orchestration against fakes of its edges: milliseconds, no agy, no threads of ours.

Each phase alone, the abort in every phase, fallbacks, settling order, and the one ending rule
shared with replay (the same steps through both paths end the same way).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from fakes import CONVERSATION
from fakes import HANG
from fakes import MODEL
from fakes import Script
from fakes import collect
from fakes import edges_for
from fakes import planner
from fakes import start_turn
from fakes import until
from fakes import user

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.outcome import EMPTY_ANSWER
from agy_provider.contract.parked import HostCall
from agy_provider.contract.turn import Binding
from agy_provider.errors import SourceError
from agy_provider.errors import TurnError
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.turn import TurnDriver
from agy_provider.live.turn import TurnEdges
from agy_provider.live.turn import history_digest
from agy_provider.live.turn_options import TurnOptions
from agy_provider.offline.replay import load_recording
from agy_provider.offline.replay import replay
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.store.sessions import SessionRecord

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# -- phases alone ----------------------------------------------------------------------------


def preparing_driver(edges: TurnEdges, context: Context, **how: Any) -> TurnDriver:
    """A driver of session "s" for calling `prepare` alone (which never touches the stream);
    `how`: the turn's options (`TurnOptions`) beside `edges`."""
    call = HostCall(context, SimpleStreamOptions(session_id="s"), AssistantMessageEventStream())
    return TurnDriver(MODEL, call, StepAssembler(model=MODEL.id), TurnOptions(edges=edges, **how))


def test_prepare_alone_decides_prompt_session_source_and_argv(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    earlier = [UserMessage(content="before", timestamp=0)]
    edges.store.put(
        "s", SessionRecord(CONVERSATION, last_step_index=7, history_digest=history_digest(earlier))
    )
    context = Context(messages=[*earlier, UserMessage(content="now", timestamp=0)])
    driver = preparing_driver(edges, context)
    plan = driver.prepare()
    assert plan.resume and plan.conversation_id == CONVERSATION and plan.min_index == 7
    assert plan.prompt == "now"  # resumed: only the new message
    assert plan.request.conversation_id == CONVERSATION
    assert plan.source_name == "sqlite"
    # A diverged history starts a new conversation with the whole history as a preamble.
    diverged = Context(messages=[UserMessage(content="other", timestamp=0), *context.messages[1:]])
    fresh = preparing_driver(edges, diverged).prepare()
    assert not fresh.resume and fresh.conversation_id == "" and "<conversation>" in fresh.prompt
    # A CLI has no history: resume whatever it is.
    assert preparing_driver(edges, diverged, continue_session=True).prepare().resume


async def test_a_turn_streams_and_settles_in_order(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    stream = start_turn(edges, session="s1")
    await until(lambda: script.sources)
    source = script.sources[0]
    source.enqueue([user(0), planner(1, "Hel", StepStatus.GENERATING)])
    source.enqueue([planner(1, "Hello", StepStatus.DONE)])
    await until(lambda: not source.queue)
    script.processes[0].exit(0)
    events = await collect(stream)
    assert [e.type for e in events if e.type.startswith("text")] == [
        "text_start",
        "text_delta",
        "text_delta",
        "text_end",
    ]
    assert isinstance(events[-1], DoneEvent)
    await wait_for_turns()
    record = edges.store.get("s1")
    assert record is not None and record.conversation_id == CONVERSATION
    assert record.last_step_index == 1 and record.agy_version == "1.2.13"
    assert source.closed


async def test_the_next_turn_resumes_even_before_the_session_is_saved(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    disk = threading.Event()
    real_write = edges.store._write_batch

    def slow_write(*args: Any) -> None:  # a slow disk: the save runs until the test lets it land
        disk.wait(HANG)
        real_write(*args)

    edges.store._write_batch = slow_write  # type: ignore[method-assign,assignment]
    first = start_turn(edges, session="s", prompt="one")
    await until(lambda: script.sources)
    script.sources[0].enqueue([user(0, "one"), planner(1, "One.")])
    await until(lambda: not script.sources[0].queue)
    script.processes[0].exit(0)
    done = (await collect(first))[-1]
    assert isinstance(done, DoneEvent)
    history = [UserMessage(content="one", timestamp=0), done.message]
    second = start_turn(edges, session="s", prompt="two", history=history)
    await until(lambda: len(script.processes) == 2)
    assert script.processes[1].request.conversation_id == CONVERSATION
    assert script.processes[1].request.prompt == "two"
    assert edges.store.get("s") is None  # the first save has not landed yet
    disk.set()
    script.processes[1].exit(0)
    await collect(second)
    await wait_for_turns()


# -- the abort, in every phase -----------------------------------------------------------


@pytest.mark.parametrize("phase", ["spawn", "binding", "streaming", "draining"])
async def test_an_abort_lands_in_every_phase(tmp_path: Path, phase: str) -> None:
    script = Script()
    if phase == "spawn":
        script.start_gate.clear()  # agy's cold start never ends
    if phase == "binding":
        script.bind_gate.clear()  # its database never appears
    edges = edges_for(script, tmp_path)
    signal = AbortSignal()
    stream = start_turn(edges, signal=signal)
    if phase == "spawn":
        await until(lambda: script.processes)
    elif phase == "binding":
        await until(lambda: script.binds)
    else:
        await until(lambda: script.sources)
        script.sources[0].enqueue([user(0), planner(1, "partial", StepStatus.GENERATING)])
        await until(lambda: not script.sources[0].queue)
    if phase == "draining":
        script.poll_gate = asyncio.Event()  # the last reads hang
        script.processes[0].exit(0)
        await asyncio.wait_for(script.poll_blocked.wait(), HANG)  # the reads after it hang
    signal.abort("test")
    events = await collect(stream)
    last = events[-1]
    assert isinstance(last, ErrorEvent) and last.reason == "aborted"
    assert sum(isinstance(e, (DoneEvent, ErrorEvent)) for e in events) == 1
    process = script.processes[0]
    # agy was ended with the short abort grace, even though the blocked phase never finished.
    assert process.terminations and process.terminations[0] <= 0.1
    if phase == "streaming":
        assert script.sources[0].cancelled  # agy was asked to stop its work
        assert "partial" in "".join(getattr(b, "text", "") for b in last.error.content)
    await wait_for_turns()


async def test_an_abort_before_the_turn_starts_spawns_nothing(tmp_path: Path) -> None:
    script = Script()
    signal = AbortSignal()
    signal.abort()
    events = await collect(start_turn(edges_for(script, tmp_path), signal=signal))
    assert isinstance(events[-1], ErrorEvent) and events[-1].reason == "aborted"
    assert not script.processes


# -- failures and fallbacks ----------------------------------------------------------------


async def test_an_rpc_source_that_cannot_start_hands_over_to_the_database(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path, names=("rpc", "sqlite"))
    script.open_errors["rpc"] = TurnError("agy exited before its language server answered")
    stream = start_turn(edges)
    # The pump closes the rpc source once it sees its open() failed.
    await until(lambda: len(script.sources) == 2 and script.sources[0].closed)
    rpc, backup = script.sources
    assert (rpc.name, backup.name) == ("rpc", "sqlite") and rpc.closed
    backup.enqueue([user(0), planner(1, "from the database")])
    await until(lambda: not backup.queue)
    script.processes[0].exit(0)
    events = await collect(stream)
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].message.content[0].text == "from the database"  # type: ignore[union-attr]


async def test_agy_failing_before_binding_reports_its_own_words(tmp_path: Path) -> None:
    script = Script(stderr="Error: authentication required. Run 'antigravity' to log in.")
    edges = edges_for(script, tmp_path)

    async def never(folder: Path, before: set[str], process: Any, **kw: Any) -> Binding:
        process.exit(1)
        raise TurnError("could not bind (agy exited first)")

    edges.bind = never
    events = await collect(start_turn(edges))
    assert isinstance(events[-1], ErrorEvent)
    assert "authentication required" in (events[-1].error.error_message or "")


async def test_a_source_failure_under_sqlite_is_one_error_event(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    stream = start_turn(edges)
    await until(lambda: script.sources)

    async def broken(*, force: bool = False) -> list[Step]:
        raise SourceError("the database went away")

    script.sources[0].poll = broken  # type: ignore[method-assign]
    script.sources[0].arrived.set()
    events = await collect(stream)
    assert isinstance(events[-1], ErrorEvent) and "went away" in (
        events[-1].error.error_message or ""
    )


# -- one ending rule for live turns and replay -----------------------------------------


def _empty_answer_db(tmp_path: Path) -> Path:
    import os
    import subprocess

    from agy_provider.live.runner import find_agy

    env = {
        **os.environ,
        "ANTIGRAVITY_APP_DATA_DIR": str(tmp_path / "state"),
        "AGY_SIM_SCENARIO": "empty-answer",
        "AGY_SIM_SPEED": "50",
    }
    subprocess.run(
        [find_agy("agy-sim"), "-p", "say nothing"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=60,
        check=True,
    )
    (db,) = (tmp_path / "state" / "conversations").glob("*.db")
    return db


@pytest.mark.parametrize(
    "name", ["simple-thinking", "quota-error", "permission-denied", "tool-run", "empty-answer"]
)
async def test_live_and_replay_end_the_same_steps_the_same_way(tmp_path: Path, name: str) -> None:
    path = _empty_answer_db(tmp_path) if name == "empty-answer" else FIXTURES / "db" / f"{name}.db"
    with load_recording(path) as recording:
        (replayed,) = list(replay(recording, "last"))
        steps = list(recording.steps())
    script = Script()
    stream = start_turn(edges_for(script, tmp_path))
    await until(lambda: script.sources)
    last_user = max(s.index for s in steps if s.kind is StepKind.USER)
    script.sources[0].enqueue([s for s in steps if s.index >= last_user])
    await until(lambda: not script.sources[0].queue)
    script.processes[0].exit(0)
    live = (await collect(stream))[-1]
    offline = replayed.events[-1]
    assert type(live) is type(offline)
    if isinstance(live, ErrorEvent):
        assert isinstance(offline, ErrorEvent)
        assert live.error.error_message == offline.error.error_message
    if name == "empty-answer":
        assert isinstance(live, ErrorEvent) and live.error.error_message == EMPTY_ANSWER


def test_prepare_for_host_tools_gives_agys_own_clock_room_for_the_hosts_waits(
    tmp_path: Path,
) -> None:
    """Waiting for the host's tool results pauses our deadlines, not agy's --print-timeout: a turn
    whose host runs the tools gives agy's clock room for them; tool results resume the session
    recorded with the `toolUse` message (its history is what precedes the results)."""
    from agy_provider.live.planning import _HOST_WAITS_IN_AGY_CLOCK
    from agy_provider.live.planning import _PRINT_TIMEOUT_MARGIN
    from agy_provider.pi.types import AssistantMessage
    from agy_provider.pi.types import TextContent
    from agy_provider.pi.types import Tool
    from agy_provider.pi.types import ToolCall
    from agy_provider.pi.types import ToolResultMessage

    script = Script()
    edges = edges_for(script, tmp_path)
    config = edges.config()
    tool = Tool("lookup", "Look up", {"type": "object"})
    asked = AssistantMessage(
        content=(ToolCall(id="mcp-1", name="lookup", arguments={}),),
        api="agy",
        provider="agy",
        model="m",
        stop_reason="toolUse",
        timestamp=0,
    )
    earlier: list[Any] = [UserMessage(content="look it up", timestamp=0), asked]
    edges.store.put(
        "s", SessionRecord(CONVERSATION, last_step_index=3, history_digest=history_digest(earlier))
    )
    results = [
        ToolResultMessage(
            tool_call_id="mcp-1", tool_name="lookup", content=[TextContent(text=t)], timestamp=0
        )
        for t in ("found", "again")
    ]
    context = Context(messages=[*earlier, *results], tools=[tool])

    def plan_for(executor: Any = None) -> Any:
        return preparing_driver(edges, context, tool_executor=executor).prepare()

    parked = plan_for()
    assert parked.offers_tools and parked.resume and parked.conversation_id == CONVERSATION
    assert parked.prompt.startswith('<tool_result tool="lookup">\nfound\n')
    assert parked.request.print_timeout == (
        config.turn_timeout
        + _PRINT_TIMEOUT_MARGIN
        + _HOST_WAITS_IN_AGY_CLOCK * config.host_tool_timeout
    )
    # Run at once by an executor, tool time counts against our turn deadline like agy's work.
    at_once = plan_for(lambda call: "ok")
    assert at_once.request.print_timeout == config.turn_timeout + _PRINT_TIMEOUT_MARGIN


async def test_agy_forking_a_resumed_conversation_runs_the_turn_again_with_the_history(
    tmp_path: Path,
) -> None:
    forked, fresh = "1" * 8 + CONVERSATION[8:], "2" * 8 + CONVERSATION[8:]
    script = Script(stated=[forked, fresh])
    edges = edges_for(script, tmp_path)
    earlier = [UserMessage(content="before", timestamp=0)]
    edges.store.put(
        "s", SessionRecord(CONVERSATION, last_step_index=3, history_digest=history_digest(earlier))
    )
    stream = start_turn(edges, session="s", prompt="now", history=earlier)
    await until(lambda: len(script.processes) == 2)
    first, second = script.processes
    assert first.request.conversation_id == CONVERSATION and first.terminations
    # The second agy starts a new conversation that carries the history.
    assert second.request.conversation_id == "" and "<conversation>" in second.request.prompt
    await until(lambda: len(script.sources) == 1)
    script.sources[0].enqueue([user(0, "now"), planner(1, "Answer.")])
    await until(lambda: not script.sources[0].queue)
    second.exit(0)
    done = (await collect(stream))[-1]
    assert isinstance(done, DoneEvent)
    (diagnostic,) = done.message.diagnostics or ()
    assert diagnostic["details"]["lost"] == CONVERSATION
    await wait_for_turns()
    record = edges.store.get("s")
    assert record is not None and record.conversation_id == fresh
