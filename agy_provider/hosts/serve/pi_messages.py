"""pi's own wire API (`pi-messages`, `@earendil-works/pi-ai` ≥ 1.6): `POST /pi/messages` with
`{model, context, options}`, run as serve's turn and answered with pi's own events over SSE.

The codec only: the request becomes a `ServeAsk` and an `Owner` (pi's `options.sessionId` an
explicit key, `serve/owners`' rule), the turn runs as every API's does (`serve/turn`), and each pi
event goes out as pi-ai's `pi-messages` client reads it — no `partial`, block signatures on the
`*_end` events, `done`/`error` with `usage`, `responseId` (the continuity mark), `responseModel`.
Refusals before the stream are an HTTP status with `{error: {message, code}}`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response

from agy_provider.errors import UsageError
from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.ask import forced_choice
from agy_provider.hosts.serve.ask import read_model
from agy_provider.hosts.serve.ask import session_key
from agy_provider.hosts.serve.body import BodyError
from agy_provider.hosts.serve.body import parse_body
from agy_provider.hosts.serve.http import SseResponse
from agy_provider.hosts.serve.http import sse
from agy_provider.hosts.serve.log import RequestRecord
from agy_provider.hosts.serve.log import record_of
from agy_provider.hosts.serve.owners import Owner
from agy_provider.hosts.serve.owners import owner_of
from agy_provider.hosts.serve.tokens import context_window
from agy_provider.hosts.serve.tokens import estimate_context
from agy_provider.hosts.serve.turn import check_request_images
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingEndEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.events import ToolCallDeltaEvent
from agy_provider.pi.events import ToolCallEndEvent
from agy_provider.pi.events import ToolCallStartEvent
from agy_provider.pi.host_input import normalise_turn
from agy_provider.pi.options import ThinkingLevel
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.workers import off_loop

if TYPE_CHECKING:
    from agy_provider.hosts.serve.models import ModelChoice
    from agy_provider.hosts.serve.turn import RunningTurn
    from agy_provider.hosts.serve.turn import ServeTurns

__all__ = ["PATH", "PiMessagesServer", "pi_ask", "pi_error", "pi_events", "pi_owner", "respond"]

log = logging.getLogger(__name__)

# pi-ai posts to `<baseUrl>/messages`: a models.json provider with baseUrl `http://HOST:PORT/pi`.
PATH: Final = "/pi/messages"

# pi's thinking levels → ours. pi 1.6's `max` is agy's top level as serve's other APIs name it:
# the provider asks agy for its highest effort it offers every model (`high`).
_LEVELS: Final[dict[str, ThinkingLevel]] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
}
# An error's `code` by HTTP status: pi-ai appends it to the message (`… (code)`).
_CODES: Final = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    413: "request_too_large",
    429: "rate_limited",
    502: "agy_failed",
    503: "unavailable",
}
# A body longer than this is converted and counted in a worker (as serve's other routes do).
_PARSE_OFF_LOOP = 256 * 1024


class PiMessagesServer(Protocol):
    """What the route needs of `serve/app.ServeServer`."""

    turns: ServeTurns

    async def choose_model(self, asked: str) -> ModelChoice: ...

    async def note_turn(self, turn: RunningTurn, record: RequestRecord | None) -> None: ...


# --- the request ---------------------------------------------------------------------------------


def pi_error(status: int, message: str, code: str | None = None) -> JSONResponse:
    """A refusal as pi-ai's `pi-messages` client reads it: `{error: {message, code}}`."""
    error = {"message": message, "code": code or _CODES.get(status, "error")}
    return JSONResponse({"error": error}, status)


def pi_owner(options: Mapping[str, Any], headers: Mapping[str, str]) -> Owner:
    """Whose request: `x-agy-session` pins one; else pi's `sessionId` option is an explicit key
    (checked; a bad one is refused, naming the field); else the session headers, then the
    transcript (`serve/owners.owner_of`). Raises `RequestError`."""
    if headers.get("x-agy-session"):
        return owner_of({}, headers)
    key = session_key(options.get("sessionId"), "options.sessionId")
    if key:
        return Owner(key, "options.sessionId")
    return owner_of({}, headers)


def pi_ask(body: Mapping[str, Any]) -> ServeAsk:
    """`{model, context, options}` as a turn's ask (always streamed). Raises `RequestError`."""
    model = read_model(body.get("model"))
    options = _options(body)
    raw = body.get("context")
    if not isinstance(raw, Mapping):
        raise RequestError("context: expected pi's Context object (messages)", param="context")
    try:
        context = normalise_turn(model, raw, None).context
    except UsageError as exc:
        raise RequestError(str(exc), param="context") from exc
    context = dataclasses.replace(context, messages=tuple(_unmarked(m) for m in context.messages))
    choice = options.get("toolChoice")
    named = choice.get("function") if isinstance(choice, Mapping) else None
    schema, forced, forced_any = forced_choice(
        choice,
        named.get("name") if isinstance(named, Mapping) else None,
        list(context.tools or ()),
        (None, "options.toolChoice"),
    )
    if choice == "none" or forced or forced_any:
        # `none`: agy may call none of them; a forced call is the answer's shape instead.
        context = dataclasses.replace(context, tools=None)
    return ServeAsk(
        model=model,
        context=context,
        stream=True,
        reasoning=_reasoning(options.get("reasoning")),
        json_schema=schema,
        forced_tool=forced,
        forced_any=forced_any,
    )


def _options(body: Mapping[str, Any]) -> Mapping[str, Any]:
    options = body.get("options")
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise RequestError("options: expected an object", param="options")
    return options


def _reasoning(value: object) -> ThinkingLevel | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in _LEVELS:
        raise RequestError(
            f"options.reasoning: one of {', '.join(_LEVELS)}", param="options.reasoning"
        )
    return _LEVELS[value]


def _unmarked(message: Message) -> Message:
    """A client's copy of an answer without the provider state it carries (`responseId`, text
    and tool-call signatures): a client's mark never names a conversation — our own answers are
    restored from serve's memory for their owner (`serve/owners`). Thinking keeps its
    signature, which `serve/owners` checks is serve's own for this owner."""
    if not isinstance(message, AssistantMessage):
        return message
    content = tuple(
        dataclasses.replace(block, text_signature=None)
        if isinstance(block, TextContent)
        else dataclasses.replace(block, thought_signature=None)
        if isinstance(block, ToolCall)
        else block
        for block in message.content
    )
    return dataclasses.replace(message, content=content, response_id=None)


async def respond(server: PiMessagesServer, request: Request) -> Response:
    """`POST /pi/messages`: the turn's pi events as SSE, or the refusal as an HTTP status."""
    record = record_of(request.scope)
    raw = await request.body()
    big = len(raw) > _PARSE_OFF_LOOP
    try:
        body = await parse_body(raw)
    except BodyError as exc:
        return pi_error(400, str(exc))
    try:
        owner = pi_owner(_options(body), request.headers)
        ask = await off_loop(pi_ask, body) if big else pi_ask(body)
        ask = dataclasses.replace(ask, session_key=owner.key, key_source=owner.source)
        choice = await server.choose_model(ask.model)
        if record is not None:
            record.model_asked, record.key_source = ask.model, owner.source
            record.model_used = choice.used
        ask = dataclasses.replace(ask, model=choice.used)
        await check_request_images(ask.context)
        tokens = (
            await off_loop(estimate_context, ask.context) if big else estimate_context(ask.context)
        )
        window = context_window(ask.model)
        if tokens > window:
            # The words pi's `isContextOverflow` knows (Anthropic's).
            return pi_error(
                400,
                f"prompt is too long: {tokens} tokens > {window} maximum (estimated); "
                "shorten or compact the conversation",
                "context_length_exceeded",
            )
        await server.turns.check(ask)
    except RequestError as exc:
        return pi_error(exc.status, str(exc))
    except (TypeError, AttributeError, ValueError, RecursionError) as exc:
        log.info("a malformed pi-messages request: %r", exc)
        return pi_error(400, "the request is malformed: check its fields' types")
    placement = server.turns.owners.place(ask, owner)

    def start() -> RunningTurn:
        return server.turns.start(ask, placement, owner, input_tokens=tokens)

    return SseResponse(_frames(server, start, record))


async def _frames(
    server: PiMessagesServer, start: Callable[[], RunningTurn], record: RequestRecord | None
) -> AsyncIterator[bytes]:
    # `start` goes out before the turn starts, as `stream_simple` pushes it before its turn
    # runs: started first, the turn's launch would hold the loop ahead of the first frame. A
    # client gone by then starts no turn.
    yield sse({"type": "start"})
    turn = start()
    try:
        async for data in pi_events(turn):
            if data["type"] != "start":
                yield sse(data)
    finally:
        await server.note_turn(turn, record)


# --- the answer ----------------------------------------------------------------------------------


async def pi_events(turn: RunningTurn) -> AsyncIterator[dict[str, Any]]:
    """The turn's events as `pi-messages` sends them. Blocks are numbered as the client builds
    its message (held text of a forced call never counts); a forced call goes out as the
    message's tool call, ending `toolUse`."""
    numbers: dict[int, int] = {}
    async for event in turn.events():
        if isinstance(event, DoneEvent) and turn.forced_call is not None:
            for call_frame in _call_frames(len(numbers), turn.forced_call):
                yield call_frame
            yield _final("done", "toolUse", event.message, turn)
            return
        frame = _frame(event, numbers, turn)
        if frame is not None:
            yield frame


def _frame(
    event: AssistantMessageEvent, numbers: dict[int, int], turn: RunningTurn
) -> dict[str, Any] | None:
    """One event as pi's wire JSON (None: nothing the client reads)."""
    if isinstance(event, StartEvent):
        return {"type": "start"}
    if isinstance(event, DoneEvent):
        return _final("done", event.reason, event.message, turn)
    if isinstance(event, ErrorEvent):
        return _final("error", event.reason, event.error, turn)
    source = event.content_index
    if isinstance(event, TextStartEvent | ThinkingStartEvent | ToolCallStartEvent):
        numbers[source] = len(numbers)
    index = numbers.get(source)
    if index is None:  # a block whose start the client never saw
        return None
    frame: dict[str, Any] = {"type": event.type, "contentIndex": index}
    if isinstance(event, TextDeltaEvent | ThinkingDeltaEvent | ToolCallDeltaEvent):
        frame["delta"] = event.delta
    elif isinstance(event, ToolCallStartEvent):
        call = _block(event.partial, source)
        if isinstance(call, ToolCall):
            frame.update(id=call.id, toolName=call.name)
    elif isinstance(event, ToolCallEndEvent):
        frame["toolCall"] = event.tool_call.to_json()
    elif isinstance(event, TextEndEvent):
        frame["content"] = event.content
        text = _block(event.partial, source)
        if isinstance(text, TextContent) and text.text_signature:
            frame["contentSignature"] = text.text_signature
    elif isinstance(event, ThinkingEndEvent):
        frame["content"] = event.content
        # serve's own signature (`serve/owners`): the block comes back as this owner's.
        frame["contentSignature"] = turn.sign(event.content)
        thinking = _block(event.partial, source)
        if isinstance(thinking, ThinkingContent) and thinking.redacted:
            frame["redacted"] = True
    return frame


def _block(partial: AssistantMessage, index: int) -> object:
    return partial.content[index] if 0 <= index < len(partial.content) else None


def _call_frames(index: int, call: ToolCall) -> list[dict[str, Any]]:
    arguments = call.to_json()["arguments"]
    return [
        {"type": "toolcall_start", "contentIndex": index, "id": call.id, "toolName": call.name},
        {
            "type": "toolcall_delta",
            "contentIndex": index,
            "delta": json.dumps(arguments, ensure_ascii=False),
        },
        {"type": "toolcall_end", "contentIndex": index, "toolCall": call.to_json()},
    ]


def _final(kind: str, reason: str, message: AssistantMessage, turn: RunningTurn) -> dict[str, Any]:
    """`done` or `error` with what pi keeps of the message: usage, the mark, the model."""
    frame: dict[str, Any] = {"type": kind, "reason": reason, "usage": message.usage.to_json()}
    if kind == "error":
        frame["errorMessage"] = message.error_message or "the agy turn failed"
    if message.response_id:
        frame["responseId"] = message.response_id
    answered = message.response_model or turn.stream.facts.model
    if answered:
        frame["responseModel"] = answered
    return frame
