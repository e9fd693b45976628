"""The one way a command-line turn meets the user's signals: SIGINT, SIGTERM and SIGHUP abort the
turn (agy's tree is ended), and a second may stop the wait for that; `ask` and `chat` share it."""

from __future__ import annotations

import asyncio
import contextlib
import signal as signals
from collections.abc import Callable
from collections.abc import Iterator

from agy_provider.pi.options import AbortSignal

__all__ = ["ABORT_SIGNALS", "abort_on_signals"]

ABORT_SIGNALS: tuple[signals.Signals, ...] = (signals.SIGINT, signals.SIGTERM, signals.SIGHUP)


@contextlib.contextmanager
def abort_on_signals(
    abort: AbortSignal,
    *,
    on_first: Callable[[str], None] | None = None,
    second_cancels: bool = True,
) -> Iterator[list[int]]:
    """Turn `ABORT_SIGNALS` on the running loop into `abort`; yields the signals received, in order.

    The first aborts the turn with `interrupted by NAME` (after `on_first(NAME)`, which can say
    so), which ends agy's tree and then the stream. A later one cancels the task that entered
    this block when `second_cancels` (the provider still ends agy's tree as its task is
    cancelled); else it is only recorded. Where signals cannot be handled (not the main thread,
    or Windows) the block runs without them.
    """
    loop = asyncio.get_running_loop()
    waiting = asyncio.current_task()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        name = signals.Signals(signum).name
        if len(received) == 1:
            if on_first is not None:
                on_first(name)
            abort.abort(f"interrupted by {name}")
        elif second_cancels and waiting is not None:
            waiting.cancel()

    installed = []
    for signum in ABORT_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(signum)
    try:
        yield received
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
