"""A blocking API for callers without an event loop: `iter_events` and `complete`.

Owns the private loop each turn runs on (in a daemon thread) and the promise that no agy outlives
the caller: closing the iterator, an exception or Ctrl-C in the caller aborts the turn and waits
until agy's process tree is gone; so does the interpreter's exit.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any

from agy_provider.errors import IncompleteStreamError
from agy_provider.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.host_input import HostTurn, normalise_turn
from agy_provider.options import AbortSignal
from agy_provider.provider import stream_simple, wait_for_turns
from agy_provider.types import AssistantMessage

__all__ = ["complete", "iter_events"]

log = logging.getLogger(__name__)

# How long stopping may take before we say so: an abort lands within ~200 ms and agy's tree is
# then ended (TERM, 0.1 s, KILL); this only bounds a hang, on a busy machine, with a warning.
_STOP_BOUND = 60.0


class _End:
    """The turn's thread finished; `error` is what it raised, if anything."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class _TurnThread:
    """One turn on a private event loop in a daemon thread, feeding a thread-safe queue."""

    def __init__(self, turn: HostTurn, kwargs: dict[str, Any]) -> None:
        self.stop = AbortSignal()
        self.events: queue.SimpleQueue[AssistantMessageEvent | _End] = queue.SimpleQueue()
        self._turn = turn
        self._kwargs = kwargs
        self._thread = threading.Thread(target=self._main, name="agy-provider turn", daemon=True)

    def start(self) -> None:
        _live.add(self)
        self._thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # handed to the caller's thread, never lost here
            self.events.put(_End(exc))
        else:
            self.events.put(_End())
        finally:
            _live.discard(self)

    async def _run(self) -> None:
        turn = self._turn
        host_signal = turn.options.signal
        options = dataclasses.replace(turn.options, signal=self.stop)
        stream = stream_simple(turn.model, turn.context, options, **self._kwargs)
        if turn.abort is not None:
            turn.abort.attach(stream)
        follow = None
        if host_signal is not None:
            follow = asyncio.ensure_future(self._follow(host_signal))
        try:
            async for event in stream:
                self.events.put(event)
        finally:
            if follow is not None:
                follow.cancel()
            # The session is saved and agy stopped after the final event: wait for both here,
            # so the caller is handed back control only when nothing of the turn runs.
            await wait_for_turns()

    async def _follow(self, host_signal: AbortSignal) -> None:
        await host_signal.wait()
        self.stop.abort(host_signal.reason)

    def finish(self, reason: str) -> None:
        """Abort the turn (if still running) and wait until its thread, and so agy, is done."""
        self.stop.abort(reason)
        self._thread.join(_STOP_BOUND)
        if self._thread.is_alive():
            log.warning("the agy turn did not stop within %.0f s of %s", _STOP_BOUND, reason)


_live: set[_TurnThread] = set()


@atexit.register
def _stop_all_turns() -> None:
    # Daemon threads die with the interpreter without cleaning up: end every turn first.
    for runner in list(_live):
        runner.finish("the interpreter exiting")


def iter_events(
    model: object, context: object, options: object = None, **kwargs: Any
) -> Iterator[AssistantMessageEvent]:
    """Run a turn and yield its pi events as they stream, from plain synchronous code.

    Takes what `stream_simple` takes (`kwargs`: `cwd`, `agy_bin`, `store`, `continue_session`,
    …). The turn starts at the first `next()`, on a private event loop in a daemon thread, so
    no loop needs to be running. Stopping early — `close()` on the iterator, leaving a `for`
    loop with `break`, an exception or Ctrl-C while waiting — aborts the turn and returns only
    once agy's process tree is gone; when the events run out, agy is gone too.

    Raises `UsageError` at once for input `stream_simple` cannot use; every failure of the turn
    itself is its final `error` event.
    """
    turn = normalise_turn(model, context, options)
    return _events(turn, dict(kwargs))


def _events(turn: HostTurn, kwargs: dict[str, Any]) -> Generator[AssistantMessageEvent, None, None]:
    runner = _TurnThread(turn, kwargs)
    runner.start()
    ended = False
    try:
        while True:
            item = runner.events.get()
            if isinstance(item, _End):
                ended = True
                if item.error is not None:
                    raise item.error
                return
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
    final: AssistantMessage | None = None
    for event in iter_events(model, context, options, **kwargs):
        if isinstance(event, DoneEvent):
            final = event.message
        elif isinstance(event, ErrorEvent):
            final = event.error
    if final is None:
        raise IncompleteStreamError("the turn ended without a done or error event")
    return final
