"""The start deadline: agy must start a turn within `start_timeout` seconds of its launch, or it
is ended (its tree), and the turn falls back once to `agy -p` or ends saying what agy printed.

Owns what "started" means (a warm agy's `init`; for `agy -p`, a stdout line past its `init`; or
agy's exit) and the wait for it; the warm pool remembers a binary whose warm agy did not start
(`warm/pool.py`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agy_provider.contract.turn import TurnProcess
from agy_provider.errors import TurnError
from agy_provider.live.resources import ABORT_GRACE
from agy_provider.live.turn_edges import TurnPlan
from agy_provider.live.warm.turn import WarmTurn

__all__ = ["await_start", "turn_started"]

log = logging.getLogger("agy_provider.live.turn")  # what hosts filter on for a turn's story

# How much of agy's stderr the error quotes (its last words: a sign-in prompt is a few lines).
_QUOTED = 600
# A warm turn whose agy refused to stay falls back to `agy -p` meanwhile, whose stdout is another
# (`process.events` changes): the wait looks again at least this often (seconds).
_RECHECK = 0.1


def turn_started(process: TurnProcess) -> bool:
    """Whether agy started the turn: a warm agy printed its `init` (only once started, before any
    input, AGY-FORMATS §2.4); an `agy -p` printed a line past its `init` (from 1.3 it prints
    `init` at once, before its own start, so only the turn's first step proves that); or agy
    exited (its exit then speaks). A process that states its conversation without any stdout
    event (not agy's stdout: nothing to judge by) counts as started."""
    if process.returncode is not None:
        return True
    lines = process.events.line_count
    if isinstance(process, WarmTurn) and process.oneshot is None:
        return lines >= 1
    return lines >= 2 or (lines == 0 and bool(process.stated_conversation_id))


async def await_start(process: TurnProcess, plan: TurnPlan) -> None:
    """Wait until `process` started the turn (`turn_started`), at most `start_timeout` seconds,
    then once more after falling back from a warm agy to `agy -p`. Raises `TurnError` naming what
    agy printed and what to do when it did not start; its tree is ended first. No deadline for
    agy's plain text output (nothing to judge by), or when `start_timeout` is not below
    `turn_timeout` (the turn deadline bounds the start then, as it did before)."""
    config = plan.config
    timeout = config.start_timeout
    if process.request.output_format != "stream-json" or timeout >= config.turn_timeout:
        return
    if await _started_within(process, timeout):
        return
    if isinstance(process, WarmTurn) and await process.start_timed_out(timeout):
        log.warning(
            "agy did not start within %gs (start_timeout) as one process for many turns; "
            "this turn falls back to agy -p",
            timeout,
        )
        if await _started_within(process, timeout):
            return
    said = process.stderr_text().strip()
    await process.terminate(grace=ABORT_GRACE)
    said = process.stderr_text().strip() or said
    quoted = f"; it printed: {said[-_QUOTED:]}" if said else " and printed nothing on stderr"
    raise TurnError(
        f"agy did not start the turn within {timeout:g}s (start_timeout){quoted}. Run "
        "`agy-provider doctor` to check agy's install and sign-in; raise start_timeout "
        "(AGY_START_TIMEOUT) if agy only starts slowly on this machine"
    )


async def _started_within(process: TurnProcess, timeout: float) -> bool:
    """Wait for `turn_started`: woken by each batch of agy's stdout lines, by its exit, and at
    least every `_RECHECK` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not turn_started(process):
        left = deadline - loop.time()
        if left <= 0:
            return False
        events = process.events  # a warm turn's falls back to `agy -p`'s: read it each time
        moved = asyncio.Event()
        events.add_listener(moved.set)
        waits: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(moved.wait()),
            asyncio.ensure_future(process.wait()),
        }
        try:
            await asyncio.wait(
                waits, timeout=min(left, _RECHECK), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            events.remove_listener(moved.set)
            for wait in waits:
                wait.cancel()
    return True
