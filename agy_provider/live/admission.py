"""Admission of cold agy starts: at most `cold_starts` agys start at once (each holds its slot
from its spawn until it says `init`, or exits), and turns beyond that wait in one FIFO queue.

Owns `ColdStarts` (the gate, thread-safe: turns run on many loops, agys are seen by threads),
`Ticket` (one slot), `TurnAdmission` (a turn's place in it, its wait) and `COLD_STARTS`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol
from typing import Self
from typing import TypeVar

__all__ = [
    "COLD_STARTS",
    "AnnouncesInit",
    "ColdStarts",
    "Ticket",
    "TurnAdmission",
    "cold_starts_for",
    "hold_until_init",
    "hold_until_stated",
]

log = logging.getLogger(__name__)


class AnnouncesInit(Protocol):
    """An agy that calls back when it said `init` and when it closed (`warm_agy.WarmAgy`)."""

    on_said_init: Callable[[Self], None]
    on_closed: Callable[[Self], None]


_Agy = TypeVar("_Agy", bound=AnnouncesInit)


def default_cold_starts() -> int:
    """One cold start per CPU this process may run on: agy's start (its binary, its language
    server: 2.3–2.8 s, AGY-FORMATS §2.4) is CPU-bound, so more at once only slows them all."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus)


def cold_starts_for(setting: int) -> int:
    """The bound a `cold_starts` setting means: 0 is the default (the CPU count)."""
    return setting if setting > 0 else default_cold_starts()


class Ticket:
    """One admitted cold start: `release` gives its slot to the next in line (once; any thread)."""

    def __init__(self, gate: ColdStarts, waited: float) -> None:
        self._gate = gate
        self.waited = waited  # seconds it waited in the queue
        self._released = False
        self._lock = threading.Lock()

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._gate._release()


@dataclasses.dataclass(eq=False, slots=True)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False  # a slot is counted for it (under the gate's lock)


class ColdStarts:
    """The gate: `admit` (await a slot, first come first served; cancelling the wait leaves the
    queue), `try_admit` (a slot now, only when nobody waits), `configure` (the bound)."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit if limit is not None else default_cold_starts()
        self._lock = threading.Lock()
        self._running = 0  # slots held
        self._queue: collections.deque[_Waiter] = collections.deque()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def running(self) -> int:
        """Cold starts admitted and not yet over."""
        return self._running

    @property
    def waiting(self) -> int:
        """Turns in the queue."""
        return len(self._queue)

    def configure(self, limit: int) -> None:
        """The bound from now on (each turn's settings; the newest wins). A higher bound admits
        waiting turns at once; a lower one lets the starts in flight finish."""
        if limit < 1:
            raise ValueError(f"cold starts must be at least 1, not {limit}")
        with self._lock:
            if limit == self._limit:
                return
            self._limit = limit
            self._grant()

    def try_admit(self) -> Ticket | None:
        """A slot now, or None when the bound is reached or turns wait (they come first)."""
        with self._lock:
            if self._queue or self._running >= self._limit:
                return None
            self._running += 1
        return Ticket(self, 0.0)

    async def admit(self) -> Ticket:
        """Wait for a slot, after every turn that asked earlier. Cancellation leaves the queue
        (a slot granted meanwhile goes to the next in line)."""
        loop = asyncio.get_running_loop()
        asked = time.monotonic()
        with self._lock:
            if not self._queue and self._running < self._limit:
                self._running += 1
                return Ticket(self, 0.0)
            waiter = _Waiter(loop, loop.create_future())
            self._queue.append(waiter)
            ahead, running, limit = len(self._queue) - 1, self._running, self._limit
        log.info(
            "cold start queued: %d agy starting (cold_starts %d), %d turn(s) ahead",
            running,
            limit,
            ahead,
        )
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                if waiter.granted:
                    self._running -= 1
                    self._grant()
                else:
                    with contextlib.suppress(ValueError):
                        self._queue.remove(waiter)
            raise
        waited = time.monotonic() - asked
        log.info("cold start admitted after %.2f s in the queue", waited)
        return Ticket(self, waited)

    def _release(self) -> None:
        with self._lock:
            self._running -= 1
            self._grant()

    def _grant(self) -> None:
        """Slots to the first waiters while there is room (lock held)."""
        while self._queue and self._running < self._limit:
            waiter = self._queue.popleft()
            waiter.granted = True
            self._running += 1
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
            except RuntimeError:  # its loop is closed: nobody takes this slot
                waiter.granted = False
                self._running -= 1


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class TurnAdmission:
    """A turn's cold start: the ticket it holds until it hands it to the agy it starts, and how
    long it waited for it in all (`waited`, seconds; the turn's facts carry it)."""

    def __init__(self, gate: ColdStarts | None = None) -> None:
        self.gate = gate if gate is not None else COLD_STARTS
        self.ticket: Ticket | None = None
        self.waited = 0.0
        self.queued = False  # waiting in line now (an abort then has no agy to end)

    def take_now(self) -> bool:
        """Holds a slot now (one it had, or a free one nobody waits for)."""
        if self.ticket is None:
            self.ticket = self.gate.try_admit()
        return self.ticket is not None

    async def wait(self) -> None:
        """Holds a slot, waiting in the queue for one if need be."""
        if self.ticket is None:
            self.queued = True
            try:
                self.ticket = await self.gate.admit()
            finally:
                self.queued = False
            self.waited += self.ticket.waited

    def hand_over(self) -> Ticket | None:
        """The slot, for the agy it starts (which then releases it)."""
        ticket, self.ticket = self.ticket, None
        return ticket

    def release(self) -> None:
        """A slot not used (the turn found an agy, or ended first) goes back."""
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            ticket.release()


def hold_until_init(agy: _Agy, ticket: Ticket) -> None:
    """`agy`, not started yet, keeps `ticket` until it says `init` or is closed (whichever
    first; set before its spawn, so neither is missed)."""
    said, closed = agy.on_said_init, agy.on_closed

    def on_said_init(a: _Agy) -> None:
        ticket.release()
        said(a)

    def on_closed(a: _Agy) -> None:
        ticket.release()
        closed(a)

    agy.on_said_init = on_said_init
    agy.on_closed = on_closed


def hold_until_stated(
    ticket: Ticket, stated: asyncio.Event, exited: asyncio.Event
) -> asyncio.Task[None]:
    """A one-shot agy keeps `ticket` until its stdout stated the conversation (`init`) or it
    exited; the slot goes back too when the loop ends the task. Keep the task referenced."""

    async def hold() -> None:
        waits = [asyncio.ensure_future(stated.wait()), asyncio.ensure_future(exited.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            ticket.release()

    return asyncio.ensure_future(hold())


COLD_STARTS = ColdStarts()
