"""serve's OpenAI side: `POST /v1/chat/completions` (streamed as SSE chunks or whole) and the
`GET /v1/models` list, from a turn's pi events.

Thinking (agy's own tool runs included) goes out as `reasoning_content`, the field DeepSeek,
vLLM and LiteLLM clients read; a host tool agy called as `tool_calls` with finish reason
`tool_calls`; usage as `prompt_tokens` (uncached + cached), `completion_tokens` (with thinking).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from agy_provider.hosts.serve.turn import RunningTurn
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.events import ToolCallEndEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import Usage

__all__ = ["completion", "completion_chunks", "finish_reason", "model_list", "openai_usage"]

_FINISH = {"stop": "stop", "length": "length", "toolUse": "tool_calls"}


def finish_reason(message: AssistantMessage, forced: ToolCall | None = None) -> str:
    """OpenAI's finish reason for how the turn ended (a redacted answer: `content_filter`; a
    forced tool choice's answer: `tool_calls`)."""
    if forced is not None:
        return "tool_calls"
    if any(isinstance(b, ThinkingContent) and b.redacted for b in message.content) and not any(
        isinstance(b, TextContent) and b.text for b in message.content
    ):
        return "content_filter"
    return _FINISH.get(message.stop_reason, "stop")


def openai_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input + usage.cache_read + usage.cache_write,
        "completion_tokens": usage.output,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    }


def _tool_call(call: ToolCall, index: int) -> dict[str, Any]:
    return {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
    }


def completion(turn: RunningTurn, message: AssistantMessage, model: str) -> dict[str, Any]:
    """The whole `chat.completion` object for a turn that ended `done`."""
    text = "".join(b.text for b in message.content if isinstance(b, TextContent))
    if turn.ask.json_schema is not None:
        text = turn.structured_text
    thinking = "\n\n".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    if turn.forced_call is not None:  # the answer is the call, its JSON is not said as text
        text, calls = "", [turn.forced_call]
    body: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if thinking:
        body["reasoning_content"] = thinking
    if calls:
        body["tool_calls"] = [_tool_call(c, i) for i, c in enumerate(calls)]
        for call in body["tool_calls"]:
            del call["index"]
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": body,
                "finish_reason": finish_reason(message, turn.forced_call),
                "logprobs": None,
            }
        ],
        "usage": openai_usage(message.usage),
    }


async def completion_chunks(
    turn: RunningTurn, model: str, on_error: Any
) -> AsyncIterator[dict[str, Any] | str]:
    """The stream's chunks (then `[DONE]`); a failed turn ends with `on_error(message)`'s
    object, which OpenAI's SDKs raise as an `APIError`."""
    ident = f"chatcmpl-{secrets.token_hex(12)}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield chunk({"role": "assistant", "content": ""})
    calls = 0
    thought = False
    event: AssistantMessageEvent
    async for event in turn.events():
        if isinstance(event, ThinkingStartEvent) and thought:
            yield chunk({"reasoning_content": "\n\n"})  # one block from the next
        elif isinstance(event, ThinkingDeltaEvent) and event.delta:
            thought = True
            yield chunk({"reasoning_content": event.delta})
        elif isinstance(event, TextDeltaEvent) and event.delta:
            yield chunk({"content": event.delta})
        elif isinstance(event, ToolCallEndEvent):
            yield chunk({"tool_calls": [_tool_call(event.tool_call, calls)]})
            calls += 1
        elif isinstance(event, DoneEvent):
            if turn.forced_call is not None:
                yield chunk({"tool_calls": [_tool_call(turn.forced_call, calls)]})
            yield chunk({}, finish_reason(event.message, turn.forced_call))
            if turn.ask.include_usage:
                yield {**chunk({}), "choices": [], "usage": openai_usage(event.message.usage)}
        elif isinstance(event, ErrorEvent):
            yield on_error(event.error)
            return
    yield "[DONE]"


def model_list(ids: list[str]) -> dict[str, Any]:
    """`GET /v1/models` for OpenAI's clients."""
    return {
        "object": "list",
        "data": [{"id": i, "object": "model", "created": 0, "owned_by": "agy"} for i in ids],
    }
