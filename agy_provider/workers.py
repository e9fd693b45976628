"""The worker threads live turns run their blocking work in (files, SQLite, process scans, forks).

A pool of our own, its threads started ahead of need from a worker thread: Python starts an
executor's threads lazily, inside `submit`, and waits there for each new thread to run — on a
busy machine that wait, on the host's event loop, is the largest stall a turn causes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import ParamSpec
from typing import TypeVar

__all__ = ["WORKERS", "in_background", "off_loop", "start_workers"]

P = ParamSpec("P")
R = TypeVar("R")

# Enough for 20 concurrent turns' short reads at once; each task is milliseconds.
WORKERS = 8
_PREFIX = "agy-provider-worker"
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=_PREFIX)
_started = False
_lock = threading.Lock()
# A worker waits at most this long for the others to start (a bound for the worst case only).
_GATE_TIMEOUT = 30.0


def start_workers() -> None:
    """Start every worker thread now (call it off the event loop; later calls do nothing)."""
    global _started
    if threading.current_thread().name.startswith(f"{_PREFIX}_"):  # the pool's own threads
        return  # from inside the pool the barrier could never fill
    with _lock:
        if _started:
            return
        _started = True
    gate = threading.Barrier(WORKERS)
    # Each task holds its thread until all are running, so the pool must make all of them.
    futures = []
    try:
        for _ in range(WORKERS):
            futures.append(_pool.submit(_hold, gate))
    except RuntimeError:
        # The program is exiting (no new work, no new threads): release the threads already
        # waiting at the gate, or the exit, which joins them, would wait forever.
        gate.abort()
        return
    for future in futures:
        future.result()


def _hold(gate: threading.Barrier) -> None:
    with contextlib.suppress(threading.BrokenBarrierError):
        gate.wait(timeout=_GATE_TIMEOUT)


def _start_in_background() -> None:
    threading.Thread(target=start_workers, name="agy-provider-prestart", daemon=True).start()


# Started as soon as the live path is imported, from a thread of its own, so no `submit` from
# the loop has to start one (one short thread start here, at import, instead of eight later).
_start_in_background()


async def off_loop(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`asyncio.to_thread` on our pool: run `func` in a worker thread, keeping context vars."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await loop.run_in_executor(_pool, call)


def in_background(
    func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
) -> concurrent.futures.Future[R]:
    """Run `func` in a worker thread without waiting for it; a cancelled caller does not stop it.

    For work that must finish even if the task that asked for it is cancelled (a session save),
    or that may block for milliseconds and whose result nobody awaits (closing an inotify
    descriptor waits for the kernel's grace period). At interpreter exit the pool finishes the
    work already given to it before the process ends.
    """
    return _pool.submit(functools.partial(contextvars.copy_context().run, func, *args, **kwargs))
