"""One turn in a warm agy, as the turn driver sees a process (`TurnProcess`): its line sent on
stdin, its stdout lines and `result` brought to the turn's loop, the agy let go or ended after.

`spawn_turn` is the turn's default spawn: a warm turn where the request allows one, else
`runner.AgyProcess` (`agy -p`), which is also where a warm turn falls back when agy refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Mapping
from typing import Any

import psutil

from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.argv import stdin_turn
from agy_provider.agy.result import read_result
from agy_provider.agy.stdout import StdoutEvents
from agy_provider.agy.step import StepUsage
from agy_provider.agy.verdict import agy_error
from agy_provider.live.admission import TurnAdmission
from agy_provider.live.runner import AgyProcess
from agy_provider.live.warm.agy import KILL_AFTER
from agy_provider.live.warm.agy import WarmAgy
from agy_provider.live.warm.pool import POOL
from agy_provider.live.warm.pool import WarmPool
from agy_provider.live.warm.pool import newest_index
from agy_provider.workers import off_loop

__all__ = ["WarmTurn", "spawn_turn"]

log = logging.getLogger(__name__)

# A warm agy that exited while idle is replaced this many times before the turn gives up on
# warm agys and runs `agy -p`.
_REPLACEMENTS = 2
# agy's exit code for flags it does not know (Go's flag package, argparse alike).
_BAD_FLAGS = 2
# After an ERROR `result`, agy writes its own words on stderr (1.3.x: the `AGY_ERROR:` line that
# is the turn's error) on another pipe, which may be read after stdout: the turn waits this long
# at most for them, polling every _LAST_WORDS_POLL.
_LAST_WORDS_WAIT = 0.5
_LAST_WORDS_POLL = 0.005
# A warm agy that did not start in time gets this long after SIGINT before its tree is ended
# (SIGTERM, then SIGKILL): a hung start rarely answers a signal, and the turn's fallback waits.
_HUNG_GRACE = 0.1


class WarmTurn:
    """One turn's view of a warm agy (`TurnProcess`). Until the turn's `result`, `returncode`
    is None; then 0, or 1 for an ERROR result; an agy that died mid-turn gives its exit code."""

    def __init__(self, request: TurnRequest, pool: WarmPool = POOL) -> None:
        self.request = request
        self._asked = request  # as the turn planned it (`request` then names the agy's own)
        self.pool = pool
        self._events = StdoutEvents()  # this turn's stdout lines only
        self.id_stated = asyncio.Event()
        self.oneshot: AgyProcess | None = None  # agy refused to stay: the turn runs `agy -p`
        self.agy: WarmAgy | None = None
        self._done = asyncio.Event()
        self._code: int | None = None
        self._by_result = False
        self._stderr_from = 0
        self._let_go = False
        self._letting_go: asyncio.Future[None] | None = None  # release or discard, once
        self.loop: asyncio.AbstractEventLoop | None = None  # the turn's: where its lines go
        # The turn's host tools (`TurnTools`, prepared by the turn's launch): the warm agy serves
        # them from its own bridge and relays each call to them.
        self.tools: Any = None
        # agy's running usage total before this turn (its `result` totals run over the process).
        self.previous_total: StepUsage | None = None
        self._falling_back: asyncio.Task[None] | None = None  # agy refused: `agy -p` starting
        self._ending: asyncio.Task[None] | None = None  # after the `result`: `_finish_by_result`
        self._said = ""  # why the fallback failed, as agy's last words
        # The turn's cold start slot, when its agy (warm or `-p`) must start (`live/admission`).
        self.admission = TurnAdmission()
        self._warm_said = ""  # what a warm agy that did not start in time said, for the error

    # -- TurnProcess ---------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        if self._done.is_set():
            return self._code
        return self.oneshot.returncode if self.oneshot is not None else None

    @property
    def events(self) -> StdoutEvents:
        """What agy's stdout said in this turn (the stream-json source reads it)."""
        return self.oneshot.events if self.oneshot is not None else self._events

    @property
    def argv(self) -> list[str]:
        """agy's command line: the warm agy's (no prompt in it), or `agy -p`'s."""
        if self.oneshot is not None:
            return self.oneshot.argv
        return self.agy.argv if self.agy is not None else []

    @property
    def pid(self) -> int:
        """agy's pid (the warm agy's, or `agy -p`'s); 0 before the turn has one."""
        if self.oneshot is not None:
            return self.oneshot.pid
        return self.agy.pid if self.agy is not None else 0

    @property
    def stated_conversation_id(self) -> str:
        return self.events.conversation_id

    @property
    def result(self) -> Mapping[str, Any] | None:
        return self.events.result

    async def start(self) -> None:
        """Send the turn to a warm agy (one leased from the pool, started if need be); where
        none can be had, or agy refuses to run that way, start `agy -p` for this turn."""
        self.loop = asyncio.get_running_loop()
        line = stdin_turn(self.request.prompt)
        for _ in range(_REPLACEMENTS + 1):
            if self.pool.refuses(self._asked):
                break
            agy = await self._lease()
            if agy is None:
                break
            self._use(agy)
            try:
                # A line the pipe takes whole goes now (one write, no trip to a worker).
                sent = agy.send(line, block=False)
                if sent < len(line):
                    await off_loop(agy.send, line[sent:])
                return
            except OSError as exc:  # it exited while idle: another takes its place
                log.info("warm agy %d was gone (%s); starting another", agy.pid, exc)
                self._drop(agy)
                await off_loop(self.pool.discard, agy, interrupt=False, grace=0.0)
        await self._start_oneshot()

    async def _lease(self) -> WarmAgy | None:
        agy = self.pool.lease_now(self._asked)  # the usual case: no trip to a worker to lease
        if agy is None:
            agy = await self._lease_off_loop()
        if agy is None or not self._asked.conversation_id:
            return agy
        try:
            stale = await off_loop(self.pool.stale, agy)
        except BaseException:
            _end_elsewhere(self.pool, agy)  # leased for a turn that is not going on
            raise
        if not stale:
            return agy
        # Its conversation moved on since its last turn (another host's turn, say): a new agy
        # continues it from its database (`--conversation`), having seen all of it.
        log.info(
            "warm agy %d has not seen conversation %s's newest steps; starting another",
            agy.pid,
            self._asked.conversation_id,
        )
        await off_loop(self.pool.discard, agy, interrupt=False, grace=KILL_AFTER)
        return await self._lease_off_loop()

    async def _lease_off_loop(self) -> WarmAgy | None:
        offered = self.tools.offered if self.tools is not None else ()
        while True:
            # Leased as the turn planned it: a replaced agy's log file, token and folders are
            # not this turn's settings.
            leasing = asyncio.ensure_future(
                off_loop(self.pool.lease, self._asked, offered, self.admission)
            )
            try:
                leased = await asyncio.shield(leasing)
            except asyncio.CancelledError:
                # The lease goes on in its thread: whatever agy it gives is ended, whenever it
                # does.
                leasing.add_done_callback(self._abandoned)
                raise
            if leased is None or isinstance(leased, WarmAgy):
                if leased is not None:
                    self.admission.release()  # an agy was there after all
                return leased
            # WAIT_FOR_ADMISSION: a new agy must start and as many as the machine bears are
            # starting; the turn waits in line.
            await self.admission.wait()

    def _abandoned(self, leasing: asyncio.Future[Any]) -> None:
        self.admission.release()
        if leasing.cancelled() or leasing.exception() is not None:
            return
        agy = leasing.result()
        if isinstance(agy, WarmAgy):
            _end_elsewhere(self.pool, agy)

    def _use(self, agy: WarmAgy) -> None:
        # The rpc source finds agy's server by the process's own log file and token; agy's
        # folders include its own tool bridge's.
        self.agy = agy
        self.request = dataclasses.replace(
            self._asked,
            log_file=agy.template.log_file,
            csrf_token=agy.template.csrf_token,
            extra_dirs=agy.extra_dirs,
        )
        self._stderr_from = agy.stderr_total
        self.previous_total = agy.last_total
        agy.attach(self)

    def _drop(self, agy: WarmAgy) -> None:
        agy.detach(self)
        self.agy = None
        self._events = StdoutEvents()
        self.id_stated.clear()

    async def start_timed_out(self, timeout: float) -> bool:
        """The start deadline passed with the turn not started on its warm agy: that agy is
        ended (its tree), its binary runs `agy -p` for a while (`WarmPool.start_failed`), and
        this turn falls back once to its own `agy -p`. False when the turn is not on a warm agy
        (it runs `agy -p` already, or it is over): nothing to fall back from."""
        agy = self.agy
        if agy is None or self.oneshot is not None or self._done.is_set():
            return False
        said = agy.stderr_since(self._stderr_from)
        self.pool.start_failed(self._asked, timeout, said)
        self._drop(agy)
        # Ended before another agy may start on its conversation (two would be two writers).
        await off_loop(self.pool.discard, agy, interrupt=True, grace=_HUNG_GRACE)
        self._warm_said = said
        await self._start_oneshot()
        return True

    async def _start_oneshot(self) -> None:
        request = self.request = dataclasses.replace(self._asked, warm=False)
        if self.tools is not None:
            # No warm agy to serve the host's tools: the turn's own bridge, as a one-shot turn's.
            folder = await self.tools.serve_alone()
            request = self.request = dataclasses.replace(
                request, extra_dirs=(*request.extra_dirs, folder)
            )
        process = AgyProcess(request)
        process.id_stated = self.id_stated
        process.admission = self.admission  # a slot the turn holds already, else its wait
        try:
            await process.start()
        finally:
            self.oneshot = process  # also when its start failed: it ends what it started

    def _fell_back(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and not self._done.is_set():
            self._said = f"agy -p could not start: {task.exception()}"
            self._finish(1)

    async def wait(self, timeout: float | None = None) -> int | None:
        if self.oneshot is None or self._done.is_set():
            done = asyncio.ensure_future(self._done.wait())
            waits: set[asyncio.Future[Any]] = {done}
            if self._falling_back is not None:
                waits.add(self._falling_back)
            try:
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                done.cancel()
            if self._done.is_set() or self.oneshot is None:
                return self._code if self._done.is_set() else None
        # Fell back to `agy -p` (meanwhile, or earlier): its exit is the turn's.
        return await self.oneshot.wait(timeout)

    async def finish_stdout(self, timeout: float) -> None:
        """Binding after agy's exit: its lines are already here (the hub hands them over
        before it reports the exit)."""
        if self.oneshot is not None:
            await self.oneshot.finish_stdout(timeout)

    async def terminate(self, grace: float = 2.0) -> None:
        """The turn lets go of agy: after its `result`, agy goes back to the pool (idle, warm);
        else (an abort, a deadline, a failure) agy is interrupted and its tree ended."""
        if self._falling_back is not None:
            with contextlib.suppress(Exception):
                await self._falling_back
        if self._ending is not None:
            self._ending.cancel()  # the turn is over: nothing waits for its words now
        self.admission.release()  # a slot won for an agy that never started
        if self.oneshot is not None:
            await self.oneshot.terminate(grace)
            return
        agy = self.agy
        if self._letting_go is None:
            if agy is None or self._let_go:
                return
            self._let_go = True
            agy.detach(self)
            self._letting_go = asyncio.ensure_future(self._let_go_of(agy, grace))
        # Shielded: a cleanup cut short by the loop's end runs this again and waits for the
        # same letting go, so what the turn closes next (its sources) closes after it, as
        # after a one-shot agy's end.
        await asyncio.shield(self._letting_go)

    async def _let_go_of(self, agy: WarmAgy, grace: float) -> None:
        if self._by_result and not agy.exited.is_set():
            await off_loop(
                self.pool.release, agy, new_conversation=not self.request.conversation_id
            )
            return
        await off_loop(self.pool.discard, agy, interrupt=True, grace=grace)
        if not self._done.is_set():  # ended before its `result`: agy's exit is the turn's
            self._finish(agy.exit_code if agy.exit_code is not None else 1)

    def tree(self) -> list[psutil.Process]:
        """agy and its live descendants (blocking: a scan of our tree)."""
        if self.oneshot is not None:
            return self.oneshot.tree()
        return self.agy.track() if self.agy is not None else []

    async def scan_tree(self) -> list[psutil.Process]:
        if self.oneshot is not None:
            return await self.oneshot.scan_tree()
        return await off_loop(self.agy.track) if self.agy is not None else []

    def stderr_text(self) -> str:
        if self._said:
            return self._said
        if self.oneshot is not None:
            return self.oneshot.stderr_text() or self._warm_said
        return self.agy.stderr_since(self._stderr_from) if self.agy is not None else ""

    def stdout_text(self) -> str:
        if self.oneshot is not None:
            return self.oneshot.stdout_text()
        return self.events.text.decode("utf-8", "replace")

    # -- what the warm agy hands over (from its threads) ---------------------------------------

    def deliver(self, data: bytes, ended: bool) -> None:
        self._call(self._take, data, ended)

    def died(self, code: int) -> None:
        self._call(self._died, code)

    def _call(self, fn: Any, *args: Any) -> None:
        loop = self.loop
        try:
            if loop is None:
                raise RuntimeError("no loop")
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the turn's loop is gone: nobody reads this turn any more
            agy = self.agy
            if agy is not None and not self._let_go:
                self._let_go = True
                agy.detach(self)
                log.info("warm agy %d: its turn's loop is gone; ending it", agy.pid)
                _end_elsewhere(self.pool, agy)

    def _take(self, data: bytes, ended: bool) -> None:
        if self.events.feed(data):
            self.id_stated.set()
        if ended and not self._done.is_set() and self._ending is None:
            result = read_result(self.events.result or {})
            self._by_result = True
            if self.agy is None:
                self._finish(1 if result.status == "ERROR" else 0)
                return
            words = result.status == "ERROR" and not result.canceled
            self._ending = asyncio.ensure_future(
                self._finish_by_result(self.agy, 1 if result.status == "ERROR" else 0, words)
            )

    async def _finish_by_result(self, agy: WarmAgy, code: int, words: bool) -> None:
        """The turn's `result` is in: what agy's conversation holds now (`seen_index`), read
        before the turn's end reaches its host, so no other host can know of the conversation's
        turn and write to it in between; then, after an ERROR, agy's last words."""
        try:
            agy.seen_index = await off_loop(newest_index, agy)
        except Exception:  # unknown: its next turn starts another agy (no proof it saw all)
            log.exception("warm agy %d: its conversation's newest step could not be read", agy.pid)
        if words:
            await self._wait_for_last_words(agy)
        if not self._done.is_set():
            self._finish(code)

    async def _wait_for_last_words(self, agy: WarmAgy) -> None:
        """An ERROR `result`: wait until agy's stderr has said something more (its `AGY_ERROR:`
        line on 1.3.x, which is then the turn's error), or it exited, or at most
        `_LAST_WORDS_WAIT`: whichever pipe the hub read first, the turn's words are the same."""
        said = agy.stderr_since(self._stderr_from)
        if not agy_error(said):  # else its words are here already
            deadline = asyncio.get_running_loop().time() + _LAST_WORDS_WAIT
            while (
                len(agy.stderr_since(self._stderr_from)) == len(said)
                and not agy.exited.is_set()
                and asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(_LAST_WORDS_POLL)

    def _died(self, code: int) -> None:
        if self._done.is_set() or self._falling_back is not None:
            return
        agy = self.agy
        said = bool(self._events.line_count or self._events.text)  # its `init`, if any, too
        if agy is not None and _refused_flags(code, agy, said=said):
            # agy refused the flags of a process for many turns (too old): `agy -p` instead.
            self.pool.refused(self.request, agy.stderr_since(0))
            self._drop(agy)
            self._falling_back = asyncio.ensure_future(self._start_oneshot())
            self._falling_back.add_done_callback(self._fell_back)
            return
        # Mid-turn, even an exit 0 without a `result` is a failure: say agy's last words. Its
        # stdout ended without the turn's `result` (the stream-json source then hands over).
        self.events.end_of_input()
        self._finish(code or 1)

    def _finish(self, code: int) -> None:
        self._code = code
        self._done.set()


def _refused_flags(code: int, agy: WarmAgy, *, said: bool) -> bool:
    """agy exited at once refusing the flags of a process for many turns (too old for them):
    exit 2, nothing on stdout (`said`: this turn heard anything from it), and stderr naming one
    of those flags."""
    words = agy.stderr_since(0)
    return code == _BAD_FLAGS and not said and ("input-format" in words or "output-format" in words)


def _end_elsewhere(pool: WarmPool, agy: WarmAgy) -> None:
    """End a warm agy nobody awaits, from a thread of its own (not the hub, which reads every
    agy's pipes and must never wait, nor a loop that may be closing)."""
    threading.Thread(
        target=pool.discard,
        args=(agy,),
        kwargs={"interrupt": True, "grace": 0.1},
        name=f"agy-provider-warm-end-{agy.pid}",
        daemon=True,
    ).start()


def spawn_turn(request: TurnRequest) -> WarmTurn | AgyProcess:
    """The turn's process: a warm turn when the request allows one, else `agy -p`."""
    return WarmTurn(request) if request.warm else AgyProcess(request)
