"""The turn driver's collaborators alone, against the fakes of a turn's edges (`fakes.py`): the source
handover and its table of moves, the final drain, host-tool parking, the settling records, and
the deadlines. Milliseconds, no agy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes import HANG
from fakes import Exits
from fakes import FakeParkedTurn
from fakes import Script
from fakes import collect
from fakes import edges_for
from fakes import planner
from fakes import start_turn
from fakes import until
from fakes import user

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import TurnOutcome
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import SourceError
from agy_provider.errors import TurnError
from agy_provider.live.handover import TRANSITIONS
from agy_provider.live.handover import Action
from agy_provider.live.handover import Event
from agy_provider.live.handover import HandoverError
from agy_provider.live.handover import HandoverState
from agy_provider.live.handover import SourceHandover
from agy_provider.live.handover import database_source
from agy_provider.live.parking import PARKED
from agy_provider.live.parking import STOPPED_WAITING
from agy_provider.live.parking import HostToolParking
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.settle import UnsavedRecords
from agy_provider.live.settle import reached_record
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import ToolCall
from agy_provider.store.config import Config
from agy_provider.store.sessions import SessionRecord

S = HandoverState


def handover_for(
    tmp_path: Path, script: Script, names: tuple[str, ...] = ("rpc", "sqlite")
) -> tuple[SourceHandover, TurnContext]:
    specs = edges_for(script, tmp_path, names=names).sources()
    turn = TurnContext(
        session_id="", prompt="hi", cwd=".", config=Config(), event_source="auto", permissions="ask"
    )
    return SourceHandover(specs, turn, database=database_source(specs)), turn


async def on_preferred(handover: SourceHandover) -> None:
    """Open rpc beside the database and move to it once it is up."""
    await handover.open("rpc")
    assert handover.upgrading is not None
    await asyncio.wait_for(handover.upgrading, HANG)
    await handover.take_upgrade(finished=False)


class Failing:
    """Makes a fake source's `poll` raise once."""

    def __init__(self, source: Any) -> None:
        self.real, self.source = source.poll, source
        source.poll = self.poll

    async def poll(self, *, force: bool = False) -> list[Step]:
        self.source.poll = self.real
        raise SourceError("the language server stopped answering")


# -- the handover ------------------------------------------------------------------------------


def test_every_state_has_its_moves_and_every_state_can_close() -> None:
    moves: dict[HandoverState, set[HandoverState]] = {}
    for (state, _event), (new, _action) in TRANSITIONS.items():
        moves.setdefault(state, set()).add(new)
    assert set(moves) == set(HandoverState)
    for state, targets in moves.items():
        assert S.CLOSED in targets, state
    assert S.OPENING not in set().union(*moves.values())  # nothing moves back to opening


@pytest.mark.parametrize("state", list(HandoverState))
@pytest.mark.parametrize("event", list(Event))
def test_every_state_and_event_does_what_the_table_says_or_is_refused_by_name(
    tmp_path: Path, state: HandoverState, event: Event
) -> None:
    handover, _turn = handover_for(tmp_path, Script())
    handover.state = state
    if (state, event) in TRANSITIONS:
        new, action = TRANSITIONS[state, event]
        assert handover.fire(event) is action
        assert handover.state is new
    else:
        with pytest.raises(HandoverError, match=f"{event.name}.*{state.name}"):
            handover.fire(event)
        assert handover.state is state


def test_a_failure_after_the_last_resort_is_the_turns_and_the_stream_is_left_to_the_drain() -> None:
    for state in (S.DIRECT, S.ALONE, S.DATABASE, S.PREFERRED):
        assert TRANSITIONS[state, Event.STDOUT_DOWN] == (state, Action.RAISE)
    assert TRANSITIONS[S.LAST, Event.FAILED] == (S.LAST, Action.RAISE)
    for state in (S.ALONE, S.PREFERRED, S.STDOUT):
        assert TRANSITIONS[state, Event.FAILED_AFTER_EXIT] == (state, Action.KEEP)


async def test_the_database_is_the_one_the_registry_says_reads_it(tmp_path: Path) -> None:
    script = Script()
    specs = edges_for(script, tmp_path, names=("rpc", "sqlite")).sources()
    assert database_source(specs) == "sqlite"
    assert database_source({"rpc": specs["rpc"]}) is None


async def test_a_preferred_source_opens_beside_the_database_then_takes_over(
    tmp_path: Path,
) -> None:
    script = Script()
    handover, turn = handover_for(tmp_path, script)
    await handover.open("rpc")
    assert handover.state is S.BESIDE and handover.name == turn.source == "sqlite"
    assert handover.upgrading is not None
    await asyncio.wait_for(handover.upgrading, HANG)
    await handover.take_upgrade(finished=False)
    assert handover.state in {S.PREFERRED} and handover.name == turn.source == "rpc"
    rpc, database = (s for s in script.sources)
    assert handover.source is rpc and not rpc.closed and not database.closed
    await handover.aclose()
    assert handover.state is S.CLOSED and rpc.closed and database.closed


async def test_a_preferred_source_that_cannot_open_leaves_the_database_reading(
    tmp_path: Path,
) -> None:
    script = Script(open_errors={"rpc": TurnError("no language server")})
    handover, turn = handover_for(tmp_path, script)
    await handover.open("rpc")
    assert handover.upgrading is not None
    await asyncio.wait({handover.upgrading}, timeout=HANG)
    await handover.take_upgrade(finished=True)
    rpc, database = script.sources
    assert handover.state is S.DATABASE and turn.source == "sqlite" and rpc.closed
    assert handover.source is database and not database.closed


async def test_a_failing_preferred_source_falls_back_to_the_database_at_once(
    tmp_path: Path,
) -> None:
    script = Script()
    handover, turn = handover_for(tmp_path, script)
    await on_preferred(handover)
    rpc, database = script.sources
    Failing(rpc)
    database.enqueue([user(0)])
    # agy still runs: the same poll reads the database instead, and the rpc source is closed.
    assert await handover.poll(Exits(exited=False)) == [user(0)]  # type: ignore[arg-type]
    assert handover.state is S.DATABASE and turn.source == "sqlite" and rpc.closed


async def test_a_failing_preferred_source_after_agy_exited_leaves_it_to_the_drain(
    tmp_path: Path,
) -> None:
    script = Script()
    handover, _turn = handover_for(tmp_path, script)
    await on_preferred(handover)
    rpc, _database = script.sources
    Failing(rpc)
    assert await handover.poll(Exits(exited=True)) == []  # type: ignore[arg-type]
    assert handover.state is S.PREFERRED and not rpc.closed


async def test_the_database_failing_is_the_turns_error(tmp_path: Path) -> None:
    script = Script()
    handover, _turn = handover_for(tmp_path, script, names=("sqlite",))
    await handover.open("sqlite")
    assert handover.state is S.DIRECT
    Failing(script.sources[0])
    with pytest.raises(SourceError):
        await handover.poll(Exits(exited=False))  # type: ignore[arg-type]


async def test_an_illegal_move_is_refused(tmp_path: Path) -> None:
    script = Script()
    handover, _turn = handover_for(tmp_path, script, names=("sqlite",))
    await handover.open("sqlite")
    with pytest.raises(HandoverError, match="no move for event PREFERRED_UP in state DIRECT"):
        handover.fire(Event.PREFERRED_UP)
    assert handover.state is S.DIRECT


# -- the drain -------------------------------------------------------------------------------


async def test_the_drain_takes_the_streams_rest_then_reads_the_database_until_quiet(
    tmp_path: Path,
) -> None:
    script = Script()
    handover, turn = handover_for(tmp_path, script)
    await on_preferred(handover)
    rpc, database = script.sources
    rpc.enqueue([planner(1, "Hel", StepStatus.GENERATING)])
    database.enqueue([user(0), planner(1, "Hello")])
    polls: list[bool] = []
    real_poll = database.poll

    async def counted(*, force: bool = False) -> list[Step]:
        polls.append(force)
        return await real_poll(force=force)

    database.poll = counted  # type: ignore[method-assign]
    fed: list[list[Step]] = []

    async def feed(steps: list[Step]) -> None:
        fed.append(steps)

    await handover.drain(feed)
    assert fed[0] == [planner(1, "Hel", StepStatus.GENERATING)]  # the stream's rest first
    assert fed[1] == [user(0), planner(1, "Hello")]
    # A read after changes is forced; the drain ends after three quiet polls in a row.
    assert polls == [True, True, False, False]
    assert handover.state is S.DATABASE and turn.source == "sqlite"
    assert not rpc.closed  # retired: closed with the others after the final event
    await handover.aclose()
    assert rpc.closed and database.closed


# -- parking ---------------------------------------------------------------------------------


CALLS = [ToolCall(id="call-1", name="lookup")]


async def test_a_parked_turn_resumes_when_the_host_brings_the_results() -> None:
    parking, turn = HostToolParking(), FakeParkedTurn("s")
    exit_task: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
    parking.begin()
    assert parking.parked
    waiting = asyncio.ensure_future(
        parking.wait(
            turn, CALLS, exit_task, host_tool_timeout=HANG, agy_deadline=1e12, print_timeout=60
        )
    )
    await until(lambda: PARKED.all() == [turn])
    parking.answered(turn, {})
    parking.go_on()
    why, waited = await asyncio.wait_for(waiting, HANG)
    assert why == "" and waited >= 0 and parking.signal_swapped.is_set()
    assert not parking.parked and PARKED.all() == []


async def test_a_parked_turn_ended_by_another_says_why() -> None:
    parking, turn = HostToolParking(), FakeParkedTurn("s")
    exit_task: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
    parking.begin()
    waiting = asyncio.ensure_future(
        parking.wait(
            turn, CALLS, exit_task, host_tool_timeout=HANG, agy_deadline=1e12, print_timeout=60
        )
    )
    await until(lambda: PARKED.all() == [turn])
    parking.end(STOPPED_WAITING)
    why, _ = await asyncio.wait_for(waiting, HANG)
    assert why == STOPPED_WAITING
    assert PARKED.all() == []


async def test_a_parked_wait_ends_before_agys_own_clock() -> None:
    parking = HostToolParking()
    loop = asyncio.get_running_loop()
    exit_task: asyncio.Future[int | None] = loop.create_future()
    parking.begin()
    # agy's clock ends within the margin: the wait ends at once, naming that clock.
    why, _ = await parking.wait(
        FakeParkedTurn("s"),
        CALLS,
        exit_task,
        host_tool_timeout=HANG,
        agy_deadline=loop.time() + 5.0,
        print_timeout=123,
    )
    assert "--print-timeout 123s" in why and "lookup" in why
    assert not parking.parked


async def test_a_parked_wait_on_a_loop_that_stops_waiting_ends_at_once() -> None:
    parking = HostToolParking()
    loop = asyncio.get_running_loop()
    exit_task: asyncio.Future[int | None] = loop.create_future()
    parking.begin()
    PARKED.stopping.add(loop)
    try:
        why, _ = await parking.wait(
            FakeParkedTurn("s"), CALLS, exit_task, host_tool_timeout=HANG, agy_deadline=1e12, print_timeout=1
        )
    finally:
        PARKED.stopping.discard(loop)
    assert why == STOPPED_WAITING


# -- settling --------------------------------------------------------------------------------


def test_unsaved_records_stay_until_the_newest_turns_write_lands() -> None:
    memory, first, second = UnsavedRecords(), object(), object()
    old, new = SessionRecord("c", last_step_index=1), SessionRecord("c", last_step_index=3)
    memory.remember("store", {"s": old}, first)
    memory.remember("store", {"s": new}, second)
    assert memory.newest("store", {"s": old}, first) == {}  # a newer turn settled it since
    memory.forget([("store", "s")], first)  # the earlier write landing forgets nothing
    assert memory.get("store", "s") == new
    memory.forget([("store", "s")], second)
    assert memory.get("store", "s") is None


def test_nothing_reached_agy_leaves_the_session_as_it_was() -> None:
    aborted = TurnOutcome(aborted=True, error="aborted")
    kwargs: dict[str, Any] = {"conversation_id": "c", "min_index": 4, "source_name": "sqlite"}
    assert reached_record(aborted, turn_start=5, last_final=4, **kwargs) is None
    reached = reached_record(TurnOutcome(), turn_start=5, last_final=7, **kwargs)
    assert reached == SessionRecord("c", last_step_index=7, event_source="sqlite")


# -- deadlines, through the driver -------------------------------------------------------------


async def test_the_idle_deadline_ends_a_silent_agy_and_drains_what_it_wrote(
    tmp_path: Path,
) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    edges.config = lambda: Config(
        event_source="sqlite", app_data_dir=str(tmp_path / "agy"), idle_timeout=0.05
    )
    stream = start_turn(edges)
    await until(lambda: script.sources)
    script.sources[0].enqueue([user(0), planner(1, "partial", StepStatus.GENERATING)])
    events = await collect(stream)
    last = events[-1]
    assert isinstance(last, ErrorEvent) and "idle deadline" in (last.error.error_message or "")
    assert "partial" in "".join(getattr(b, "text", "") for b in last.error.content)
    assert script.processes[0].terminations  # agy was ended
    await wait_for_turns()


async def test_the_turn_deadline_ends_agy_even_while_it_makes_progress(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    edges.config = lambda: Config(
        event_source="sqlite", app_data_dir=str(tmp_path / "agy"), turn_timeout=0.05
    )
    stream = start_turn(edges)
    await until(lambda: script.sources)
    source = script.sources[0]
    source.enqueue([user(0)])
    events_task = asyncio.ensure_future(collect(stream))
    grown = ""
    while not events_task.done():  # agy keeps writing: only the turn deadline can end it
        grown += "."
        source.enqueue([planner(1, grown, StepStatus.GENERATING)])
        await asyncio.wait({events_task}, timeout=0.01)
    last = events_task.result()[-1]
    assert isinstance(last, ErrorEvent) and "turn deadline" in (last.error.error_message or "")
    await wait_for_turns()


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
