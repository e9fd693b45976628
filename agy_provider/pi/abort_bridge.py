"""Any host's abort signal as our `AbortSignal`, for as long as the turn behind a stream runs.

Owns the bridges: a listener on signals that offer one, a task for an `asyncio.Event`, a small
watcher thread for a `threading.Event` or anything with `aborted` / `is_set()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from agy_provider.errors import UsageError
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.stream import AssistantMessageEventStream

__all__ = ["SignalBridge", "bridge_signal", "forward_until_turn_ends"]

# How often a watcher thread looks at a signal it cannot wait on (or at the turn having ended,
# while it blocks in threading.Event.wait): well inside the ~200 ms an abort may take, and a
# thread asleep in wait() costs the host's loop nothing.
_WATCH_INTERVAL = 0.05

_EXPECTED = (
    "an abort signal: agy_provider.AbortSignal, asyncio.Event, threading.Event, or an object "
    "with an `aborted` flag or an `is_set()` method"
)


class SignalBridge:
    """Our `AbortSignal` for a host's signal; `attach(stream)` keeps it in step until the turn ends."""

    def __init__(self, signal: AbortSignal, start: Callable[[AssistantMessageEventStream], None]):
        self.signal = signal
        self._start = start

    def attach(self, stream: AssistantMessageEventStream) -> None:
        """Start following the host's signal; everything stops once the turn behind `stream`
        has ended (`stream.turn_ended()`: after the stream, for a turn parked on host tools)."""
        self._start(stream)


def _same(_: AssistantMessageEventStream) -> None:
    return None


def bridge_signal(host_signal: object, field: str = "options.signal") -> SignalBridge | None:
    """Wrap whatever a host passes as its abort signal. None stays None.

    Raises `UsageError` naming `field` when `host_signal` is no kind of abort signal.
    """
    if host_signal is None:
        return None
    if isinstance(host_signal, AbortSignal):
        return SignalBridge(host_signal, _same)
    ours = AbortSignal()
    if isinstance(host_signal, asyncio.Event):
        return _bridge_asyncio(host_signal, ours)
    for method in ("add_listener", "on_abort"):
        # pi-ai-python's AbortSignal (add_listener) and pi-agent-loop's (on_abort) call a
        # listener on abort and return an unsubscribe function.
        register = getattr(host_signal, method, None)
        if callable(register) and hasattr(host_signal, "aborted"):
            return _bridge_listener(host_signal, register, ours)
    if isinstance(host_signal, threading.Event) or callable(getattr(host_signal, "is_set", None)):
        return _bridge_thread(host_signal, ours)
    if isinstance(getattr(host_signal, "aborted", None), bool):
        return _bridge_thread(host_signal, ours)
    raise UsageError(f"{field}: expected {_EXPECTED}, got {type(host_signal).__name__}")


def _is_raised(host_signal: Any) -> bool:
    is_set = getattr(host_signal, "is_set", None)
    if callable(is_set):
        return bool(is_set())
    return bool(getattr(host_signal, "aborted", False))


def _reason(host_signal: Any) -> object:
    return getattr(host_signal, "reason", None)


def _bridge_listener(host_signal: Any, register: Any, ours: AbortSignal) -> SignalBridge:
    def start(stream: AssistantMessageEventStream) -> None:
        unsubscribe = register(lambda *_: ours.abort(_reason(host_signal)))
        if not callable(unsubscribe):
            return
        loop = asyncio.get_running_loop()

        async def unsubscribe_at_end() -> None:
            with contextlib.suppress(Exception):
                await stream.turn_ended()
            unsubscribe()

        _keep(loop.create_task(unsubscribe_at_end()))

    if _is_raised(host_signal):
        ours.abort(_reason(host_signal))
    return SignalBridge(ours, start)


def _bridge_asyncio(event: asyncio.Event, ours: AbortSignal) -> SignalBridge:
    def start(stream: AssistantMessageEventStream) -> None:
        async def follow() -> None:
            raised = asyncio.ensure_future(event.wait())
            ended = asyncio.ensure_future(stream.turn_ended())
            try:
                await asyncio.wait({raised, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in (raised, ended):
                    waiter.cancel()
                    with contextlib.suppress(BaseException):
                        await waiter
            if event.is_set():
                ours.abort("the host's asyncio.Event was set")

        _keep(asyncio.get_running_loop().create_task(follow()))

    if event.is_set():
        ours.abort("the host's asyncio.Event was set")
    return SignalBridge(ours, start)


def _bridge_thread(host_signal: Any, ours: AbortSignal) -> SignalBridge:
    def start(stream: AssistantMessageEventStream) -> None:
        if ours.aborted:
            return
        wait = host_signal.wait if isinstance(host_signal, threading.Event) else None

        def watch() -> None:
            while not stream.turn_done and not ours.aborted:
                if wait is not None:
                    raised = wait(_WATCH_INTERVAL)
                else:
                    raised = _is_raised(host_signal)
                    if not raised:
                        threading.Event().wait(_WATCH_INTERVAL)
                if raised:
                    ours.abort(_reason(host_signal))
                    return

        threading.Thread(target=watch, name="agy-provider abort watcher", daemon=True).start()

    if _is_raised(host_signal):
        ours.abort(_reason(host_signal))
    return SignalBridge(ours, start)


_tasks: set[asyncio.Task[None]] = set()


def _keep(task: asyncio.Task[None]) -> None:
    # The loop holds tasks weakly: keep each watcher until it is done.
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


async def forward_until_turn_ends(
    source: AbortSignal, target: AbortSignal, stream: AssistantMessageEventStream
) -> None:
    """Abort `target` when `source` is aborted, until the turn behind `stream` has ended (a turn
    parked on host tools outlives its stream, and its caller's abort must still reach it)."""
    raised = asyncio.ensure_future(source.wait())
    ended = asyncio.ensure_future(stream.turn_ended())
    try:
        await asyncio.wait({raised, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        raised.cancel()
        ended.cancel()
    if source.aborted:
        target.abort(source.reason)
