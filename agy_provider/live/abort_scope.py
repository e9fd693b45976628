"""The host's abort armed over a turn's work (trio's cancel scope): the work or the abort,
whichever comes first, following the signal a resumed turn swaps in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any
from typing import TypeVar

from agy_provider.errors import AgyError
from agy_provider.pi.options import AbortSignal

__all__ = ["until_aborted"]

T = TypeVar("T")


async def until_aborted(
    work: Awaitable[T], signal_of: Callable[[], AbortSignal | None], swapped: asyncio.Event
) -> T | None:
    """Run `work`; the abort signal (`signal_of()`, asked anew each time `swapped` is set)
    cancels it wherever it is. Returns the work's result, or None when it was aborted."""
    task = asyncio.ensure_future(work)
    while True:
        # A turn resumed by the host's tool results watches that call's signal from then on.
        swapped.clear()
        signal = signal_of()
        if signal is not None and signal.aborted:
            break
        swap = asyncio.ensure_future(swapped.wait())
        waits: set[asyncio.Future[Any]] = {task, swap}
        if signal is not None:
            waits.add(asyncio.ensure_future(signal.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            for waiting in waits - {task}:
                waiting.cancel()
        if task.done():
            return task.result()
        if not swap.done() or (signal is not None and signal.aborted):
            break
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, AgyError):
        await task
    return None
