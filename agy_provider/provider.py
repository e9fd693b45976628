"""pi's provider contract for agy: `stream_simple(model, context, options)` and `complete_simple`.

Starts a turn (`turn.TurnDriver`: prepare → launch → pump → settle) and hands back its stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from agy_provider.assembler import StepAssembler
from agy_provider.diffs import GitBaselines
from agy_provider.host_input import normalise_turn, warn_host_tools
from agy_provider.options import SimpleStreamOptions
from agy_provider.sessions import SessionStore
from agy_provider.stream import AssistantMessageEventStream
from agy_provider.turn import TurnContext, TurnDriver, TurnEdges, build_prompt, history_digest
from agy_provider.types import AssistantMessage, Context, Model

__all__ = [
    "TurnContext",
    "build_prompt",
    "complete_simple",
    "history_digest",
    "stream_simple",
    "wait_for_turns",
]


def stream_simple(
    model: Model | Any,
    context: Context | Any,
    options: SimpleStreamOptions | Any = None,
    *,
    cwd: str | None = None,
    agy_bin: str | None = None,
    event_source: str | None = None,
    store: SessionStore | None = None,
    continue_session: bool = False,
    edges: TurnEdges | None = None,
) -> AssistantMessageEventStream:
    """Start a turn with agy and return its event stream at once (call from a running loop).

    `start` is pushed immediately; every failure arrives as a final `error` event (an abort as
    reason `aborted`, within ~200 ms of the signal, at any phase). With `options.session_id` the
    turn resumes that session's conversation when the host's history matches what the session
    saw; `continue_session=True` resumes it whatever the history (a CLI has none).

    `model`, `context` and `options` may also be what other pi hosts pass (`host_input`): pi's
    camelCase JSON, another port's pydantic models or dataclasses, options as a mapping or any
    object, any abort signal. Input that cannot be understood raises `UsageError` here, before
    a stream exists (as pi-ai throws for a model no provider serves); host adapters whose
    contract forbids raising (`agy_provider.hosts`) turn it into an `error` event. A turn
    offering host tools logs one warning naming them: agy cannot call them yet.
    """
    turn = normalise_turn(model, context, options)
    model, context, options = turn.model, turn.context, turn.options
    warn_host_tools(context)
    stream = AssistantMessageEventStream()
    if turn.abort is not None:
        turn.abort.attach(stream)
    assembler = StepAssembler(
        model=model.id,
        provider=model.provider or "agy",
        api=model.api or "agy",
        timestamp=int(time.time() * 1000),
        baselines=GitBaselines(cwd),  # edits' old texts, read off the loop by the turn
    )
    for event in assembler.start():
        stream.push(event)
    if store is not None:  # never change an `edges` the caller may use again
        edges = dataclasses.replace(edges, store=store) if edges else TurnEdges(store=store)
    driver = TurnDriver(
        model,
        context,
        options,
        stream,
        assembler,
        cwd=cwd,
        agy_bin=agy_bin,
        event_source=event_source,
        continue_session=continue_session,
        edges=edges,
    )
    task = asyncio.get_running_loop().create_task(driver.run())
    _running.add(task)
    task.add_done_callback(_running.discard)
    return stream


async def complete_simple(
    model: Model, context: Context, options: SimpleStreamOptions | None = None, **kwargs: Any
) -> AssistantMessage:
    """Run a turn and return its final message (the `error` message when it failed)."""
    return await stream_simple(model, context, options, **kwargs).result()


_running: set[asyncio.Task[None]] = set()


async def wait_for_turns() -> None:
    """Wait until every turn started in this loop has finished its work after its final event
    (saving the session, stopping agy): for tests and for programs about to exit."""
    loop = asyncio.get_running_loop()
    pending = [t for t in _running if t.get_loop() is loop and t is not asyncio.current_task()]
    if pending:
        await asyncio.wait(pending)
