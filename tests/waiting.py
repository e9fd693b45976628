"""Waiting in tests for something to have happened: a condition looked at again and again under a
bound that only catches a hang, failing with what never happened. Never a fixed sleep, then assert.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Only bounds a hang: a loaded two-core machine may take many times what an idle one takes.
HANG_BOUND = 60.0
# How often a condition is looked at again: often enough to add nothing a test would notice.
EVERY = 0.01


def wait_until(
    condition: Callable[[], object], what: str, timeout: float = HANG_BOUND, every: float = EVERY
) -> None:
    """Return once `condition()` is true (blocking this thread); an `AssertionError` saying `what`
    did not happen if it is still false after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout:g} s: {what}")
        time.sleep(every)


async def until_true(
    condition: Callable[[], object],
    what: str,
    timeout: float = HANG_BOUND,
    every: float = EVERY,
    *,
    off_loop: bool = False,
) -> None:
    """`wait_until` on an event loop: the loop runs on between looks, so work the condition waits
    for (tasks, callbacks, streams) goes on. `condition` runs on the loop unless `off_loop` (for a
    costly look, such as a scan of the processes): keep it cheap."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (await asyncio.to_thread(condition) if off_loop else condition()):
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {timeout:g} s: {what}")
        await asyncio.sleep(every)
