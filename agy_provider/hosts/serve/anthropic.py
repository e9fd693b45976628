"""serve's Anthropic side: `POST /v1/messages`, streamed (`message_start`, `ping`,
`content_block_*`, `message_delta`, `message_stop`) or whole, from a turn's pi events.

agy's thinking (its own tool runs included) is `thinking` blocks; a host tool agy called is a
`tool_use` block with stop reason `tool_use`; so is the answer of the tool-forcing pattern.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from agy_provider.hosts.serve.tokens import estimate_text
from agy_provider.hosts.serve.turn import RunningTurn
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingEndEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.events import ToolCallEndEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import Usage

__all__ = ["anthropic_usage", "message", "message_events", "model_list", "stop_reason"]

_STOP = {"stop": "end_turn", "length": "max_tokens", "toolUse": "tool_use"}


def stop_reason(turn: RunningTurn, message: AssistantMessage) -> str:
    if turn.forced_call is not None:
        return "tool_use"
    return _STOP.get(message.stop_reason, "end_turn")


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_write,
    }


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}


def _blocks(turn: RunningTurn, message: AssistantMessage) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if turn.ask.json_schema is not None and turn.forced_call is None:  # structured output
        message = dataclasses.replace(
            message,
            content=[
                *(b for b in message.content if not isinstance(b, TextContent)),
                TextContent(text=turn.structured_text),
            ],
        )
    for block in message.content:
        if isinstance(block, ThinkingContent):
            # Signed (`serve/owners`): a client sends thinking back with its signature, which
            # tells serve the block is its own, unedited, and this owner's.
            signature = turn.sign(block.thinking)
            out.append({"type": "thinking", "thinking": block.thinking, "signature": signature})
        elif isinstance(block, TextContent) and turn.forced_call is None:
            out.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall):
            out.append(_tool_use(block))
    if turn.forced_call is not None:
        out.append(_tool_use(turn.forced_call))
    return out


def _estimated(turn: RunningTurn, output: float) -> dict[str, Any]:
    """Usage as known while the answer streams: the request's estimated input, the output's
    estimate so far (agy's own figures come with the last `message_delta`)."""
    return {**anthropic_usage(Usage(input=turn.input_tokens)), "output_tokens": round(output)}


def _envelope(model: str, content: list[dict[str, Any]], usage: Usage) -> dict[str, Any]:
    return {
        "id": f"msg_{secrets.token_hex(12)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": anthropic_usage(usage),
    }


def message(turn: RunningTurn, final: AssistantMessage, model: str) -> dict[str, Any]:
    """The whole `message` object for a turn that ended `done`."""
    body = _envelope(model, _blocks(turn, final), final.usage)
    body["stop_reason"] = stop_reason(turn, final)
    return body


async def message_events(
    turn: RunningTurn, model: str, on_error: Any
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of a streamed message; a failed turn ends with an `error`
    event (`on_error(message)`), which Anthropic's SDKs raise."""
    start = _envelope(model, [], Usage(input=turn.input_tokens))
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    index = -1
    output = 0.0  # the output's estimated tokens, for usage until agy's figures come
    first_delta = False
    async for event in turn.events():
        if isinstance(event, ThinkingStartEvent | TextStartEvent):
            index += 1
            block: dict[str, Any] = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if isinstance(event, ThinkingStartEvent)
                else {"type": "text", "text": ""}
            )
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": block,
                },
            )
            first_delta = True
        elif isinstance(event, ThinkingDeltaEvent | TextDeltaEvent):
            delta = (
                {"type": "thinking_delta", "thinking": event.delta}
                if isinstance(event, ThinkingDeltaEvent)
                else {"type": "text_delta", "text": event.delta}
            )
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            if first_delta:
                # Once a block has begun, its first words count: a client that aborts in the
                # middle of the first block keeps output tokens too (one event per block).
                first_delta = False
                yield _usage_so_far(turn, output + estimate_text(event.delta))
        elif isinstance(event, ThinkingEndEvent | TextEndEvent):
            if isinstance(event, ThinkingEndEvent):
                signed = {"type": "signature_delta", "signature": turn.sign(event.content)}
                yield (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": signed},
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            # What is known so far, so a client that aborts keeps it (Anthropic's message may
            # carry several `message_delta`s; the last one holds agy's own figures).
            output += estimate_text(event.content)
            yield _usage_so_far(turn, output)
        elif isinstance(event, ToolCallEndEvent):
            for frame in _tool_frames(index := index + 1, event.tool_call):
                yield frame
        elif isinstance(event, DoneEvent):
            if turn.forced_call is not None:
                for frame in _tool_frames(index := index + 1, turn.forced_call):
                    yield frame
            yield (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": stop_reason(turn, event.message),
                        "stop_sequence": None,
                    },
                    "usage": anthropic_usage(event.message.usage),
                },
            )
            yield "message_stop", {"type": "message_stop"}
        elif isinstance(event, ErrorEvent):
            yield "error", on_error(event.error)
            return


def _usage_so_far(turn: RunningTurn, output: float) -> tuple[str, dict[str, Any]]:
    """A `message_delta` with the usage known so far (no stop reason yet)."""
    return (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": None, "stop_sequence": None},
            "usage": _estimated(turn, output),
        },
    )


def _tool_frames(index: int, call: ToolCall) -> list[tuple[str, dict[str, Any]]]:
    start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
    partial = {"type": "input_json_delta", "partial_json": json.dumps(dict(call.arguments))}
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": partial}),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def model_list(ids: list[str]) -> dict[str, Any]:
    """`GET /v1/models` for Anthropic's clients (they send `anthropic-version`)."""
    data = [
        {"type": "model", "id": i, "display_name": i, "created_at": "1970-01-01T00:00:00Z"}
        for i in ids
    ]
    return {
        "data": data,
        "has_more": False,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
    }
