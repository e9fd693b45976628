"""pi's provider contract for agy: `stream_simple(model, context, options)` and `complete_simple`.

Light on purpose: a host's import line loads only pi's types; the turn machinery
(`turn_start`, `turn.TurnDriver`: prepare → launch → pump → settle) loads with the first turn,
in a worker thread while `start` is already out.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any
from typing import Literal

from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Model

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio

    from agy_provider.bridge.host_tools import ToolExecutor
    from agy_provider.live.turn_edges import TurnEdges
    from agy_provider.live.turn_options import TurnOptions
    from agy_provider.pi.host_input import HostTurn
    from agy_provider.pi.stream import AssistantMessageEventStream
    from agy_provider.store.sessions import SessionStore

__all__ = ["bare_error", "complete_simple", "stream_simple", "wait_for_turns"]

_TURN_START = "agy_provider.live.turn_start"
_PARKING = "agy_provider.live.parking"
_CANCELLED = "The turn was cancelled."


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
    tool_executor: ToolExecutor | None = None,
    conversation_id: str = "",
) -> AssistantMessageEventStream:
    """Start a turn with agy and return its event stream at once (call from a running loop).

    `start` is pushed immediately; every failure arrives as a final `error` event (an abort as
    reason `aborted`, within ~200 ms of the signal, at any phase). With `options.session_id` the
    turn resumes that session's conversation when the host's history matches what the session
    saw; `continue_session=True` whatever the history (`conversation_id`: the one it names).

    `model`, `context` and `options` may also be what other pi hosts pass (`host_input`): pi's
    camelCase JSON, another port's pydantic models or dataclasses, options as a mapping or any
    object, any abort signal. Input it cannot read raises `UsageError` here, before a stream exists,
    as pi-ai throws; `agy_provider.hosts` (no raising there) makes it an `error` event.

    Host tools (`context.tools`) are offered to agy for the turn through the MCP bridge. When agy
    calls one, the stream ends with `done` and stop reason `toolUse` whose message holds the
    `toolCall`s, while agy waits; the host runs them (pi's tool loop) and calls `stream_simple`
    again with the context ending in their `toolResult`s, which resumes the same agy turn into the
    new stream (the turn keeps what it started with — model, `cwd`, session, keywords; the new
    call gives its context and abort signal). A host that moves on instead (a new user message
    in the session) or does not answer within `host_tool_timeout` ends the waiting turn. With
    `tool_executor` (a function of the `ToolCall` returning the result's text, or raising; sync
    functions run in a worker thread) agy's calls run at once instead: the turn stays one message.
    """
    from agy_provider.live.turn_options import TurnOptions
    from agy_provider.pi.host_input import checked_cwd
    from agy_provider.pi.host_input import normalise_turn
    from agy_provider.pi.stream import AssistantMessageEventStream

    turn = normalise_turn(model, context, options)
    stream = AssistantMessageEventStream()
    # The turn's options, read once: everything below takes this value.
    how = TurnOptions(
        cwd=checked_cwd(cwd),
        agy_bin=agy_bin,
        event_source=event_source,
        store=store,
        continue_session=continue_session,
        edges=edges,
        tool_executor=tool_executor,
        conversation_id=conversation_id,
    )
    loaded = _imported(_TURN_START)
    if loaded is not None or _imported(_PARKING) is not None:  # a turn may be parked: look now
        if loaded is None:
            loaded = importlib.import_module(_TURN_START)
        task = loaded.open_turn(turn, stream, how)
        if task is None:
            return stream
    else:
        # The process's first turn: nothing can be parked yet, `start` goes out now and the
        # machinery is imported off the host's loop.
        import asyncio  # a host that calls this has it loaded already

        timestamp = _push_start(turn.model, stream)
        task = asyncio.get_running_loop().create_task(_first_turn(turn, stream, timestamp, how))
        stream.follow_turn(task)
        if turn.abort is not None:
            turn.abort.attach(stream)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return stream


def _imported(name: str) -> Any:
    """The module `name` once its import has finished, else None. A module is in `sys.modules`
    from the moment its import begins: a turn starting while the first turn's worker still
    imports the machinery must not call into half a module (it takes the first turn's path,
    whose import waits for the one under way)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return None if module is None or getattr(spec, "_initializing", False) else module


def _push_start(model: Model, stream: AssistantMessageEventStream) -> int:
    """Push the `start` the turn's assembler would (it is told so); returns its timestamp."""
    from agy_provider.pi.events import StartEvent

    timestamp = int(time.time() * 1000)
    stream.push(StartEvent(partial=_empty_message(model, "stop", timestamp)))
    return timestamp


async def _first_turn(
    turn: HostTurn, stream: AssistantMessageEventStream, timestamp: int, how: TurnOptions
) -> None:
    import asyncio

    from agy_provider.pi.events import ErrorEvent
    from agy_provider.workers import off_loop

    try:
        module = await off_loop(importlib.import_module, _TURN_START)
        task = module.open_turn(turn, stream, how, timestamp=timestamp, start_sent=True)
    except asyncio.CancelledError:  # as the driver does: the stream still ends
        stream.push(ErrorEvent(reason="aborted", error=bare_error(turn.model, _CANCELLED)))
        raise
    except Exception as exc:  # a broken install: say so, never leave the host waiting
        why = f"agy-provider could not start the turn: {type(exc).__name__}: {exc}"
        stream.push(ErrorEvent(reason="error", error=bare_error(turn.model, why)))
        return
    if task is not None:
        await task  # cancelling this task cancels the turn's


async def complete_simple(
    model: Model, context: Context, options: SimpleStreamOptions | None = None, **kwargs: Any
) -> AssistantMessage:
    """Run a turn and return its final message (the `error` message when it failed)."""
    return await stream_simple(model, context, options, **kwargs).result()


def bare_error(model: Model, message: str) -> AssistantMessage:
    return _empty_message(model, "error", 0, message)


def _empty_message(
    model: Model, stop_reason: Literal["stop", "error"], timestamp: int, error: str | None = None
) -> AssistantMessage:
    """A message of `model` with no content: a turn's `start`, or an error before any step."""
    return AssistantMessage(
        content=(),
        api=model.api or "agy",
        provider=model.provider or "agy",
        model=model.id,
        stop_reason=stop_reason,
        error_message=error,
        timestamp=timestamp,
    )


_running: set[asyncio.Task[None]] = set()


async def wait_for_turns() -> None:
    """Wait until every turn started in this loop has finished its work after its final event
    (saving the session, stopping agy): for tests and for programs about to exit.

    A turn still waiting for the host's tool results is ended first: no one will answer it.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    if not _running and _PARKING not in sys.modules:
        return  # no turn ever started here
    from agy_provider.live.parking import PARKED
    from agy_provider.live.parking import STOPPED_WAITING

    PARKED.stopping.add(loop)  # a turn that parks from now on ends at once
    try:
        for parked in PARKED.all():
            if parked.loop is loop:
                await parked.end_parked(STOPPED_WAITING)
        pending = [t for t in _running if t.get_loop() is loop and t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending)
    finally:
        PARKED.stopping.discard(loop)
