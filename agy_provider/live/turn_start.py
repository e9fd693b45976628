"""Starting a live turn behind a stream: resuming a parked one, or the assembler, `start` and
the `TurnDriver` task of a new one. The heavy half of `provider.stream_simple`.
"""

from __future__ import annotations

import asyncio
import time

from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.diffs import GitBaselines
from agy_provider.contract.parked import HostCall
from agy_provider.live.parking import NO_RESUME_OPTION
from agy_provider.live.turn import PARKED
from agy_provider.live.turn import TurnDriver
from agy_provider.live.turn import bare_error
from agy_provider.live.turn_options import TurnOptions
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.host_input import HostTurn
from agy_provider.pi.stream import AssistantMessageEventStream

__all__ = ["open_turn"]


def open_turn(
    turn: HostTurn,
    stream: AssistantMessageEventStream,
    how: TurnOptions,
    *,
    timestamp: int | None = None,
    start_sent: bool = False,
) -> asyncio.Task[None] | None:
    """Feed `stream` from a resumed parked turn, or from a new turn's task (returned).

    `how`: the turn's options (a resumed turn keeps its own). `start_sent`: the caller pushed
    the new turn's `start` already (stamped `timestamp`).
    """
    model, context, options = turn.model, turn.context, turn.options
    call = HostCall(context, options, stream)
    # Only the parked turn's owner resumes it: the same session, and not a call its host says
    # must not resume one (`NO_RESUME_OPTION`: serve, for a transcript it could not prove).
    found = PARKED.find(context.messages, options.session_id or "")
    if found is not None and (options.metadata or {}).get(NO_RESUME_OPTION):
        found = None
    if found is not None:
        parked, results = found
        if (
            parked.loop is asyncio.get_running_loop()
            and parked.task is not None
            and parked.resume(call, results)
        ):
            stream.follow_turn(parked.task)
            if turn.abort is not None:
                turn.abort.attach(stream)
            return None
    assembler = StepAssembler(
        model=model.id,
        provider=model.provider or "agy",
        api=model.api or "agy",
        timestamp=int(time.time() * 1000) if timestamp is None else timestamp,
        baselines=GitBaselines(how.cwd),  # edits' old texts, read off the loop by the turn
    )
    started = assembler.start()
    if not start_sent:
        for event in started:
            stream.push(event)
    if found is None and PARKED.resumed_by_another(context.messages):
        # Two hosts (or one host twice) bringing the same tool results: exactly one resumes
        # agy's turn; running agy on the same work again would answer twice.
        stream.push(
            ErrorEvent(
                reason="error",
                error=bare_error(
                    model,
                    "these tool results already resumed the agy turn that asked for them "
                    "(another call brought them first); wait for that call's answer",
                ),
            )
        )
        return None
    task = TurnDriver(model, call, assembler, how).start()
    # The host's abort follows the turn, which outlives a stream that ends `toolUse`.
    stream.follow_turn(task)
    if turn.abort is not None:
        turn.abort.attach(stream)
    return task
