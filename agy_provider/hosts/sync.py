"""A blocking API for callers without an event loop: `iter_events` and `complete`.

Owns the private loop each turn runs on (in a daemon thread) and the promise that no agy outlives
the caller: closing the iterator, an exception or Ctrl-C in the caller aborts the turn and waits
until agy's process tree is gone; so does the interpreter's exit.
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading

from agy_provider.errors import IncompleteStreamError

# Annotations only: `typing`, pi's values, asyncio and the turn machinery load with the first
# turn, so `import agy_provider.sync` costs less than a host's import line (mypy reads the
# constant by its name, as in the package root).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    import concurrent.futures
    from collections.abc import Generator
    from typing import Any

    from agy_provider.pi.events import AssistantMessageEvent
    from agy_provider.pi.host_input import HostTurn
    from agy_provider.pi.options import AbortSignal
    from agy_provider.pi.stream import TurnFacts
    from agy_provider.pi.types import AssistantMessage

__all__ = ["complete", "iter_events"]

# Until it is imported no turn has parked: the parked turns need not be looked for.
_PARKING = "agy_provider.live.parking"

# How long stopping may take before we say so: an abort lands within ~200 ms and agy's tree is
# then ended (TERM, 0.1 s, KILL); this only bounds a hang, on a busy machine, with a warning.
_STOP_BOUND = 60.0


class _End:
    """The turn's thread finished; `error` is what it raised, if anything."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class _TurnThread:
    """One turn on a private event loop in a daemon thread, feeding a thread-safe queue.

    A turn that ends its stream with `toolUse` (agy waits for the caller's tool results) keeps
    its loop: the caller's events end, and the call that brings the results (`_Resumed`) runs
    on the same loop. The thread ends with the turn.
    """

    def __init__(self, turn: HostTurn, kwargs: dict[str, Any]) -> None:
        from agy_provider.pi.options import AbortSignal
        from agy_provider.pi.stream import TurnFacts

        self.stop = AbortSignal()
        self.events: queue.SimpleQueue[AssistantMessageEvent | _End] = queue.SimpleQueue()
        self.parked = False  # the stream ended `toolUse`: the turn waits for tool results
        self.facts = TurnFacts()  # the stream's, once its events ran out
        self._turn = turn
        self._kwargs = kwargs
        self._thread = threading.Thread(target=self._main, name="agy-provider turn", daemon=True)

    def start(self) -> None:
        _stop_turns_at_exit()
        _live.add(self)
        self._thread.start()

    def _main(self) -> None:
        import asyncio

        try:
            asyncio.run(self._run())
        except BaseException as exc:  # handed to the caller's thread, never lost here
            self.events.put(_End(exc))
        else:
            self.events.put(_End())
        finally:
            _live.discard(self)

    async def _run(self) -> None:
        from agy_provider.hosts.turns import start_turn
        from agy_provider.live.provider import wait_for_turns

        stream = start_turn(self._turn, self.stop, **self._kwargs)
        self.parked = await _relay(stream, self._turn, self.stop, self.events)
        self.facts = stream.facts
        if self.parked:
            self.events.put(_End())  # the caller's events end; this loop serves the turn on
        # The session is saved and agy stopped after the final event: wait for both here, so
        # the caller is handed back control only when nothing of the turn runs (a parked turn:
        # until the calls that resume it have ended it, or it ends unanswered).
        await stream.turn_ended()
        await wait_for_turns()

    def finish(self, reason: str) -> None:
        """Abort the turn (if still running) and wait until its thread, and so agy, is done;
        a turn parked on the caller's tool results is left waiting for them."""
        if self.parked and reason != _EXITING:
            return
        self.stop.abort(reason)
        if self.parked:
            _end_parked_turns()
        self._thread.join(_STOP_BOUND)
        if self._thread.is_alive():
            _warn_slow_stop(reason)


class _Resumed:
    """The call that brings a parked turn its tool results, run on that turn's loop."""

    def __init__(self, turn: HostTurn, kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop):
        from agy_provider.pi.options import AbortSignal
        from agy_provider.pi.stream import TurnFacts

        self.stop = AbortSignal()
        self.events: queue.SimpleQueue[AssistantMessageEvent | _End] = queue.SimpleQueue()
        self.parked = False
        self.facts = TurnFacts()
        self._turn = turn
        self._kwargs = kwargs
        self._loop = loop
        self._done: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        import asyncio

        work = self._run()
        try:
            self._done = asyncio.run_coroutine_threadsafe(work, self._loop)
        except RuntimeError:  # the loop has closed
            work.close()
            raise

    def lost(self) -> bool:
        """True when the turn's loop closed under this call (the turn ended meanwhile and its
        loop with it) before the call could say how it ended."""
        done = self._done
        return self._loop.is_closed() and (done is None or not done.done() or done.cancelled())

    async def _run(self) -> None:
        import asyncio

        from agy_provider.hosts.turns import start_turn

        try:
            stream = start_turn(self._turn, self.stop, **self._kwargs)
            self.parked = await _relay(stream, self._turn, self.stop, self.events)
            self.facts = stream.facts
            if not self.parked:
                await stream.turn_ended()  # agy stopped and the session saved
        except asyncio.CancelledError:
            raise  # the loop is closing under this call: the caller sees it `lost()`
        except BaseException as exc:
            self.events.put(_End(exc))
            raise
        self.events.put(_End())

    def finish(self, reason: str) -> None:
        if self.parked and reason != _EXITING:
            return
        import concurrent.futures

        self.stop.abort(reason)
        if self._done is not None:
            try:
                self._done.result(_STOP_BOUND)
            except concurrent.futures.TimeoutError:
                _warn_slow_stop(reason)
            except BaseException:  # already handed to the caller as its _End
                pass


async def _relay(
    stream: Any,
    turn: HostTurn,
    stop: AbortSignal,
    events: queue.SimpleQueue[AssistantMessageEvent | _End],
) -> bool:
    """Pass the stream's events on; True when it ended `toolUse` (the turn is parked)."""
    import asyncio

    from agy_provider.pi.abort_bridge import forward_until_turn_ends
    from agy_provider.pi.events import DoneEvent

    host_signal = turn.options.signal
    follow = None
    if host_signal is not None:
        follow = asyncio.ensure_future(forward_until_turn_ends(host_signal, stop, stream))
    last: AssistantMessageEvent | None = None
    try:
        async for event in stream:
            events.put(event)
            last = event
    finally:
        if follow is not None and not (isinstance(last, DoneEvent) and last.reason == "toolUse"):
            follow.cancel()
    return isinstance(last, DoneEvent) and last.reason == "toolUse"


def _end_parked_turns() -> None:
    """End every parked turn on its own loop, from any thread (the interpreter is exiting)."""
    if _PARKING not in sys.modules:
        return  # no turn ever parked in this process
    import asyncio
    import contextlib

    from agy_provider.live.parking import PARKED
    from agy_provider.live.parking import STOPPED_WAITING

    for parked in PARKED.all():
        loop = parked.loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(parked.end_parked(STOPPED_WAITING), loop)


def _warn_slow_stop(reason: str) -> None:
    import logging  # only for this warning: `import agy_provider.sync` stays light

    logging.getLogger(__name__).warning(
        "the agy turn did not stop within %.0f s of %s", _STOP_BOUND, reason
    )


_EXITING = "the interpreter exiting"
# How often a caller waiting for a resumed turn's events checks that its loop still runs.
_LOST_CHECK = 1.0
_live: set[_TurnThread] = set()


def _stop_all_turns() -> None:
    # Daemon threads die with the interpreter without cleaning up: end every turn first.
    for runner in list(_live):
        runner.finish(_EXITING)


_hook_lock = threading.Lock()
_hooked = False


def _stop_turns_at_exit() -> None:
    """Have the interpreter's exit end every turn, before concurrent.futures refuses new work:
    ending a turn saves its session and reads agy's database in worker threads.

    Called at the first turn, not at import (which loads no turn machinery): the exit hooks
    run last-registered first, so concurrent.futures' own is registered first, by importing it
    here. `threading._register_atexit` is how concurrent.futures itself does it; plain atexit
    otherwise.
    """
    global _hooked
    with _hook_lock:
        if _hooked:
            return
        import concurrent.futures.thread  # noqa: F401  (registers its exit hook, to run after ours)

        register = getattr(threading, "_register_atexit", None)
        if callable(register):
            register(_stop_all_turns)
        else:
            atexit.register(_stop_all_turns)
        _hooked = True


def iter_events(
    model: object, context: object, options: object = None, **kwargs: Any
) -> Generator[AssistantMessageEvent, None, TurnFacts]:
    """Run a turn and yield its pi events as they stream, from plain synchronous code.

    Takes what `stream_simple` takes (`kwargs`: `cwd`, `agy_bin`, `store`, `continue_session`,
    …). The turn starts at the first `next()`, on a private event loop in a daemon thread, so
    no loop needs to be running. Stopping early — `close()` on the iterator, leaving a `for`
    loop with `break`, an exception or Ctrl-C while waiting — aborts the turn and returns only
    once agy's process tree is gone; when the events run out, agy is gone too — unless they end
    `done` with `toolUse`: agy then waits (on that private loop) for the results of the calls,
    and the `iter_events` whose context ends in them resumes the same turn (host tools; see
    `stream_simple`). The interpreter's exit ends a turn still waiting.

    Raises `UsageError` at once for input `stream_simple` cannot use; every failure of the turn
    itself is its final `error` event. When the events have run out, the generator returns the
    turn's `TurnFacts` (the value of its `StopIteration`): the conversation, agy's exit code.
    """
    from agy_provider.pi.host_input import normalise_turn

    turn = normalise_turn(model, context, options)
    return _events(turn, dict(kwargs))


def _events(
    turn: HostTurn, kwargs: dict[str, Any]
) -> Generator[AssistantMessageEvent, None, TurnFacts]:
    from agy_provider.pi.events import DoneEvent

    runner: _TurnThread | _Resumed = _TurnThread(turn, kwargs)
    loop = None
    if _PARKING in sys.modules:  # else no turn has parked yet: this one is new
        from agy_provider.live.parking import PARKED

        found = PARKED.find(turn.context.messages, turn.options.session_id or "")
        loop = found[0].loop if found is not None else None
    if loop is not None and loop.is_running():
        try:  # tool results for a turn parked on its loop: the same turn goes on
            resumed = _Resumed(turn, kwargs, loop)
            resumed.start()
            runner = resumed
        except RuntimeError:  # its loop closed just now: the results make a new turn
            runner.start()
    else:
        runner.start()
    ended = yielded = False
    try:
        while True:
            try:
                item = runner.events.get(timeout=_LOST_CHECK)
            except queue.Empty:
                if isinstance(runner, _Resumed) and runner.lost():
                    if yielded:
                        raise IncompleteStreamError(
                            "the turn ended while its tool results were being delivered"
                        ) from None
                    runner = _TurnThread(turn, kwargs)  # the results make a new turn
                    runner.start()
                continue
            if isinstance(item, DoneEvent) and item.reason == "toolUse":
                runner.parked = True  # agy waits for the caller's tool results: leave it so
            if isinstance(item, _End):
                ended = True
                if item.error is not None:
                    raise item.error
                return runner.facts
            yielded = True
            yield item
    finally:
        runner.finish("the turn ending" if ended else "the caller stopping")


def complete(
    model: object, context: object, options: object = None, **kwargs: Any
) -> AssistantMessage:
    """Run a turn to its end and return the final message (the `error` message if it failed).

    Blocking and loop-free like `iter_events`; an abort signal in `options` (a
    `threading.Event` set from another thread, our `AbortSignal`, …) ends it `aborted`.
    """
    from agy_provider.pi.events import DoneEvent
    from agy_provider.pi.events import ErrorEvent

    final: AssistantMessage | None = None
    for event in iter_events(model, context, options, **kwargs):
        if isinstance(event, DoneEvent):
            final = event.message
        elif isinstance(event, ErrorEvent):
            final = event.error
    if final is None:
        raise IncompleteStreamError("the turn ended without a done or error event")
    return final
