"""Admission of cold agy starts (`live/admission.py`): the queue alone (first come first served,
the bound, a wait cancelled, a grant racing a cancel, slots from other threads), slots given back
when a start fails or agy dies before `init`, and turns against agy-sim (issue 29, item 6)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from live_helpers import MODEL
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import scenario_answer

from agy_provider.agy.argv import TurnRequest
from agy_provider.errors import TurnError
from agy_provider.errors import UsageError
from agy_provider.live.admission import COLD_STARTS
from agy_provider.live.admission import ColdStarts
from agy_provider.live.admission import Ticket
from agy_provider.live.admission import TurnAdmission
from agy_provider.live.admission import cold_starts_for
from agy_provider.live.admission import default_cold_starts
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.runner import AgyProcess
from agy_provider.live.warm.pool import WAIT_FOR_ADMISSION
from agy_provider.live.warm.pool import WarmAgy
from agy_provider.live.warm.pool import WarmPool
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.store.config import load_config


async def settled(condition: Callable[[], bool], *, rounds: int = 1000, every: float = 0.0) -> None:
    """Let the loop run until `condition()` holds: the waits under test are loop callbacks
    (`every` 0), or work of turns and agys (`every` > 0: polled, never a fixed sleep)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(every)
    raise AssertionError("the condition never held")


# --- the queue alone ------------------------------------------------------------------------------


async def test_turns_are_admitted_in_the_order_they_asked() -> None:
    gate = ColdStarts(1)
    first = await gate.admit()
    order: list[int] = []
    tickets: dict[int, Ticket] = {}

    async def turn(n: int) -> None:
        tickets[n] = await gate.admit()
        order.append(n)

    tasks = []
    for n in range(5):
        tasks.append(asyncio.ensure_future(turn(n)))
        await settled(functools.partial(lambda k: gate.waiting == k + 1, n))
    assert gate.try_admit() is None  # the bound is reached
    first.release()
    for n in range(5):
        await settled(functools.partial(lambda k: len(order) == k + 1, n))
        assert gate.running == 1
        tickets[n].release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert gate.running == 0 and gate.waiting == 0


async def test_no_more_than_the_bound_at_once() -> None:
    gate = ColdStarts(2)
    seen: list[int] = []
    go = asyncio.Event()

    async def start() -> None:
        ticket = await gate.admit()
        seen.append(gate.running)
        await go.wait()
        ticket.release()

    tasks = [asyncio.ensure_future(start()) for _ in range(6)]
    await settled(lambda: gate.waiting == 4)
    go.set()
    await asyncio.gather(*tasks)
    assert len(seen) == 6 and max(seen) <= 2
    assert gate.running == 0


async def test_a_free_slot_goes_to_those_waiting_not_to_a_newcomer() -> None:
    gate = ColdStarts(1)
    held = await gate.admit()
    waiting = asyncio.ensure_future(gate.admit())
    await settled(lambda: gate.waiting == 1)
    held.release()  # granted to the waiter, which has not run yet
    assert gate.try_admit() is None
    (await waiting).release()
    newcomer = gate.try_admit()
    assert newcomer is not None
    newcomer.release()
    assert gate.running == 0


async def test_a_cancelled_wait_leaves_the_queue() -> None:
    gate = ColdStarts(1)
    held = await gate.admit()
    aborted = asyncio.ensure_future(gate.admit())
    behind = asyncio.ensure_future(gate.admit())
    await settled(lambda: gate.waiting == 2)
    aborted.cancel()
    with pytest.raises(asyncio.CancelledError):
        await aborted
    assert gate.waiting == 1
    held.release()
    ticket = await behind
    assert ticket.waited > 0
    ticket.release()
    assert gate.running == 0 and gate.waiting == 0


async def test_a_slot_granted_to_a_wait_cancelled_meanwhile_goes_on() -> None:
    gate = ColdStarts(1)
    held = await gate.admit()
    racing = asyncio.ensure_future(gate.admit())
    behind = asyncio.ensure_future(gate.admit())
    await settled(lambda: gate.waiting == 2)
    held.release()  # granted to `racing`; its wake-up is queued on the loop
    racing.cancel()  # and it is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await racing
    (await behind).release()
    assert gate.running == 0 and gate.waiting == 0


async def test_a_release_twice_frees_one_slot() -> None:
    gate = ColdStarts(2)
    one, two = await gate.admit(), await gate.admit()
    one.release()
    one.release()
    assert gate.running == 1
    two.release()
    assert gate.running == 0


async def test_a_slot_released_on_another_thread_wakes_the_loop() -> None:
    gate = ColdStarts(1)
    held = await gate.admit()
    waiting = asyncio.ensure_future(gate.admit())
    await settled(lambda: gate.waiting == 1)
    thread = threading.Thread(target=held.release)
    thread.start()
    ticket = await waiting
    thread.join()
    ticket.release()
    assert gate.running == 0


async def test_a_higher_bound_admits_those_waiting() -> None:
    gate = ColdStarts(1)
    held = await gate.admit()
    waiting = [asyncio.ensure_future(gate.admit()) for _ in range(2)]
    await settled(lambda: gate.waiting == 2)
    gate.configure(3)
    for ticket in await asyncio.gather(*waiting):
        ticket.release()
    held.release()
    assert gate.running == 0
    with pytest.raises(ValueError):
        gate.configure(0)


def test_the_setting_defaults_to_the_cpu_count_and_is_checked(tmp_path: Path) -> None:
    assert cold_starts_for(0) == default_cold_starts() >= 1
    assert cold_starts_for(3) == 3
    config = tmp_path / "config.json"
    assert load_config(config, env={}).cold_starts == 0
    assert load_config(config, env={"AGY_COLD_STARTS": "2"}).cold_starts == 2
    for bad in ("-1", "1.5", "many", "1001"):
        with pytest.raises(UsageError, match="cold_starts"):
            load_config(config, env={"AGY_COLD_STARTS": bad})


# --- slots given back: a start that fails, an agy that dies before `init` ---------------------


async def test_a_start_that_fails_gives_its_slot_back(tmp_path: Path) -> None:
    gate = ColdStarts(1)
    process = AgyProcess(
        TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=str(tmp_path / "no-such-agy"))
    )
    process.admission = TurnAdmission(gate)
    with pytest.raises(TurnError, match="could not start"):
        await process.start()
    await process.terminate(grace=0.1)
    assert gate.running == 0


async def test_a_one_shot_agy_holds_its_slot_until_init(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gate = ColdStarts(1)
    process = AgyProcess(TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=agy_sim_path()))
    process.admission = TurnAdmission(gate)
    await process.start()
    try:
        assert gate.running == 1 or process.id_stated.is_set()
        await asyncio.wait_for(process.id_stated.wait(), 30)
        await settled(lambda: gate.running == 0)
    finally:
        await process.terminate(grace=0.1)
    assert gate.running == 0


def test_a_warm_agy_dying_before_init_gives_its_slot_back(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A name that does not load fails agy-sim before `init` (sim/CONTRACT.md).
    monkeypatch.setenv("AGY_SIM_TURNS", "no-such-scenario")
    gate = ColdStarts(1)
    pool = WarmPool()
    request = TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=agy_sim_path(), warm=True)
    admission = TurnAdmission(gate)
    try:
        agy = pool.lease(request, (), admission)
        assert isinstance(agy, WarmAgy)
        assert admission.ticket is None  # handed to the agy
        assert agy.exited.wait(30)
        assert gate.running == 0
        # The queue moves on: the slot is free again.
        again = gate.try_admit()
        assert again is not None
        again.release()
    finally:
        pool.shutdown()


def test_a_lease_without_a_free_slot_waits_its_turn(live_env: Path, tmp_path: Path) -> None:
    gate = ColdStarts(1)
    held = gate.try_admit()
    assert held is not None
    pool = WarmPool()
    request = TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=agy_sim_path(), warm=True)
    try:
        assert pool.lease(request, (), TurnAdmission(gate)) is WAIT_FOR_ADMISSION
        assert pool.agys() == []  # nothing started
    finally:
        held.release()
        pool.shutdown()


# --- turns against agy-sim ----------------------------------------------------------------------


async def collect(
    stream: AssistantMessageEventStream,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    events = [event async for event in stream]
    return events, await stream.result()


def overlap(log: Path) -> tuple[int, int]:
    """From agy-sim's start log: how many agys started, and the most starting at once."""
    events: list[tuple[float, int]] = []
    for line in log.read_text().splitlines():
        _, what, at = line.split()
        events.append((float(at), 1 if what == "start" else -1))
    starts = sum(1 for _, d in events if d > 0)
    # An `init` at the same instant as a start ends first.
    running = most = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        most = max(most, running)
    return starts, most


@pytest.mark.slow
async def test_six_turns_with_two_cold_starts_all_finish_and_two_start_at_once_at_most(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "starts.log"
    monkeypatch.setenv("AGY_SIM_START_LOG", str(log))
    monkeypatch.setenv("AGY_SIM_COLD_START_MS", "4800")  # ÷ AGY_SIM_SPEED 4: 1.2 s each
    monkeypatch.setenv("AGY_COLD_STARTS", "2")
    streams = [
        stream_simple(
            MODEL,
            Context(messages=[UserMessage(content=f"hello {n}", timestamp=0)]),
            SimpleStreamOptions(),
        )
        for n in range(6)
    ]

    turns = await asyncio.gather(*(collect(s) for s in streams))
    await wait_for_turns()
    for events, message in turns:
        expect_done(events, message, scenario_answer("default"))
    starts, most = overlap(log)
    assert starts >= 6  # six turns, each on an agy of its own (warm or `-p`), spares beside
    assert most <= 2
    waits = [s.facts.admission_wait for s in streams]
    # Two started at once, the others waited (how many depends on when each turn got there).
    assert any(w > 0 for w in waits)
    # Spares started after the turns hold a slot until their own `init`.
    await settled(lambda: COLD_STARTS.running == 0, every=0.05)
    assert COLD_STARTS.waiting == 0


@pytest.mark.slow
async def test_a_turn_aborted_in_the_queue_leaves_it_and_ends_aborted(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_COLD_START_MS", "20000")  # ÷ AGY_SIM_SPEED 4: 5 s
    monkeypatch.setenv("AGY_COLD_STARTS", "1")
    monkeypatch.setenv("AGY_WARM_SPARES", "0")
    first = stream_simple(
        MODEL, Context(messages=[UserMessage(content="first", timestamp=0)]), SimpleStreamOptions()
    )
    abort = AbortSignal()
    queued = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="second", timestamp=0)]),
        SimpleStreamOptions(signal=abort),
    )
    events = aiter(queued)
    assert (await anext(events)).type == "start"  # sent at once, queued or not
    await settled(lambda: COLD_STARTS.waiting == 1, every=0.01)
    abort.abort()
    rest = [event async for event in events]
    expect_error(rest, await queued.result(), "aborted")
    assert COLD_STARTS.waiting == 0
    expect_done(*await collect(first), scenario_answer("default"))
    await wait_for_turns()
    assert COLD_STARTS.running == 0


@pytest.mark.slow
async def test_a_turn_alone_waits_for_nothing(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_WARM_SPARES", "0")
    stream = stream_simple(
        MODEL, Context(messages=[UserMessage(content="hello", timestamp=0)]), SimpleStreamOptions()
    )
    expect_done(*await collect(stream), scenario_answer("default"))
    await wait_for_turns()
    assert stream.facts.admission_wait == 0.0
    assert COLD_STARTS.running == 0 and COLD_STARTS.waiting == 0
