"""Launching agy for a turn's plan, apart from the driver: the conversation's lock, binding the
database agy writes (and telling agy forking a resumed conversation from agy failing), agy's verdict.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from agy_provider.agy.step import TurnOutcome
from agy_provider.contract.turn import Binding
from agy_provider.contract.turn import TurnProcess
from agy_provider.errors import AgyError
from agy_provider.errors import TurnError
from agy_provider.live.conversation_lock import ConversationLock
from agy_provider.live.runner import prompt_fits_argv
from agy_provider.live.start_deadline import await_start
from agy_provider.live.turn_edges import TurnEdges
from agy_provider.live.turn_edges import TurnPlan
from agy_provider.workers import in_background

__all__ = ["Forked", "bind_turn", "exit_outcome", "lock_conversation", "plan_off_loop"]

log = logging.getLogger("agy_provider.live.turn")  # what hosts filter on for a turn's story

# When agy fails before binding, how long to wait for its exit to explain it.
_EXIT_GRACE = 1.0
# A cold start (agy signing in, starting its server) may take longer than the idle deadline
# allows between two steps; binding gets at least this long, within the turn deadline.
_COLD_START = 60.0


class Forked(AgyError):
    """agy started another conversation than the one it was asked to resume."""

    def __init__(self, stated: str) -> None:
        super().__init__(f"agy started conversation {stated} instead")
        self.stated = stated


async def bind_turn(
    edges: TurnEdges, folder: Path, before: set[str], process: TurnProcess, plan: TurnPlan
) -> Binding:
    """The database `process` writes for `plan` (`folder` held the stems `before` it started).

    First the start deadline (`start_deadline.await_start`: agy started the turn, or fell back to
    `agy -p` that did, within `start_timeout`). Raises `Forked` when agy started another
    conversation than the one it was to resume, a `TurnError` in agy's own words when it exited
    failing before it wrote anything or did not start in time. A database
    that never appeared for the id agy stated is no failure when a source reads agy's stdout
    (`EventSourceSpec.stdout`): the binding then names it unproven, and the handover, finding it
    unreadable, reads the turn from stdout.
    """
    await await_start(process, plan)  # the start deadline: a hung start ends or falls back
    config = plan.config
    try:
        return await edges.bind(
            folder,
            before,
            process,
            prompt=plan.prompt,
            timeout=min(config.turn_timeout, max(config.idle_timeout, _COLD_START)),
            expected_id=plan.conversation_id,
            states_id=process.request.output_format == "stream-json"
            or not prompt_fits_argv(process.request.prompt),
        )
    except AgyError as exc:
        stated = process.stated_conversation_id
        if plan.conversation_id and stated and stated != plan.conversation_id:
            raise Forked(stated) from exc
        code = await process.wait(_EXIT_GRACE) if process.returncode is None else None
        code = process.returncode if code is None else code
        if code:  # agy failed before it wrote anything: its own words say why
            raise TurnError(exit_outcome(process, code).error) from exc
        if stated and any(spec.stdout for spec in edges.sources().values()):
            log.warning("%s; this turn is read from agy's stdout", exc)
            return Binding(path=folder / f"{stated}.db", conversation_id=stated)
        raise


async def plan_off_loop(
    prepare: Callable[[], TurnPlan],
) -> tuple[TurnPlan, ConversationLock | None]:
    """`prepare()` in a worker (settings and the session store are files; plugins load the
    first time), and in the same trip the lock of the conversation it continues when that is
    free at once (else None: `lock_conversation` waits for it, or says why it cannot be had).
    With many turns at once each trip to a worker waits behind the others'."""
    attempt = in_background(_plan_and_lock, prepare)
    try:
        return await asyncio.wrap_future(attempt)
    except asyncio.CancelledError:
        attempt.add_done_callback(_release_unclaimed)  # a lock taken meanwhile is nobody's
        raise


def _plan_and_lock(prepare: Callable[[], TurnPlan]) -> tuple[TurnPlan, ConversationLock | None]:
    plan = prepare()
    lock = None
    if plan.conversation_id:
        with contextlib.suppress(OSError, AgyError):
            lock = ConversationLock.try_now(plan.state_dir, plan.conversation_id)
    return plan, lock


def _release_unclaimed(
    attempt: concurrent.futures.Future[tuple[TurnPlan, ConversationLock | None]],
) -> None:
    if not attempt.cancelled() and attempt.exception() is None:
        _plan, lock = attempt.result()
        if lock is not None:
            lock.release()


async def lock_conversation(plan: TurnPlan) -> ConversationLock:
    """The lock of `plan`'s conversation, once its running turn (if any) ends: at most
    `turn_timeout`, said in the log when it waits."""

    def waiting() -> None:
        log.info(
            "another turn of agy conversation %s is running; this one waits for it",
            plan.conversation_id,
        )

    return await ConversationLock.acquire(
        plan.state_dir,
        plan.conversation_id,
        timeout=plan.config.turn_timeout,
        waiting=waiting,
    )


def exit_outcome(process: TurnProcess, code: int | None) -> TurnOutcome:
    """agy's own verdict: its exit code, and the stream-json `result` when it printed one."""
    from agy_provider.agy.verdict import exit_verdict  # agy's words: AGY_ERROR, quota

    return exit_verdict(
        code,
        stderr=process.stderr_text(),
        stdout=process.stdout_text(),
        result=process.result,
        observed_at=time.time(),
    )
