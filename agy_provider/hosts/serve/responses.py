"""serve's Responses side: `POST /v1/responses` answered from a turn's pi events — the response
object whole, or streamed as the typed events OpenAI's SDKs and Codex read — and the responses
the server remembers for `GET`/`DELETE /v1/responses/{id}` and `previous_response_id`.

agy's thinking (its own tool runs included) is `reasoning` items with a summary; each text block
a `message` item; a host tool agy called (or a forced tool choice's answer) a `function_call`
item, after which the response completes and agy waits for the `function_call_output`.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from collections.abc import Callable
from typing import Any

from agy_provider.hosts.serve.openai import finish_reason
from agy_provider.hosts.serve.responses_ask import Continued
from agy_provider.hosts.serve.responses_ask import ResponsesAsk
from agy_provider.hosts.serve.turn import RunningTurn
from agy_provider.pi.events import AssistantMessageEvent
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

__all__ = ["RESPONSES_BOUND", "RememberedResponses", "ResponseWriter", "responses_usage"]

# How many responses the server remembers for GET and `previous_response_id` (newest first):
# each holds its transcript, so a few hundred cover the clients of a loopback server without
# letting memory grow with every answer.
RESPONSES_BOUND = 512
# The `include` value that asks for reasoning items' sealed content: ours is the owner's
# signature of the thinking (`serve/owners.ThinkingSigner`), as Anthropic's thinking blocks carry.
SEALED_REASONING = "reasoning.encrypted_content"
Failure = Callable[[AssistantMessage], tuple[int, str]]
_Frame = tuple[str, dict[str, Any]]  # an event's name and its data


def responses_usage(usage: Usage) -> dict[str, Any]:
    """pi's usage as the Responses API's. agy's thinking is counted in `output_tokens`; pi's
    usage carries no split, so `reasoning_tokens` is 0 rather than a guess."""
    return {
        "input_tokens": usage.input + usage.cache_read + usage.cache_write,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read,
            "cache_write_tokens": usage.cache_write,
        },
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


class RememberedResponses:
    """The responses this server gave with `store` not false: the object (for GET) and what a
    request continuing it needs (`Continued`). Thread-safe; the newest `RESPONSES_BOUND`."""

    def __init__(self, bound: int = RESPONSES_BOUND) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[dict[str, Any], Continued]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._known)

    def remember(self, response: dict[str, Any], continued: Continued) -> None:
        with self._lock:
            self._known[response["id"]] = (response, continued)
            while len(self._known) > self._bound:
                self._known.popitem(last=False)

    def get(self, response_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._known.get(response_id)
        return found[0] if found else None

    def continued(self, response_id: str) -> Continued | None:
        with self._lock:
            found = self._known.get(response_id)
        return found[1] if found else None

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._known.pop(response_id, None) is not None


def _ident(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _reasoning(item_id: str, text: str, sealed: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "status": "completed",
    }
    if sealed:
        item["encrypted_content"] = sealed
    return item


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _call(
    item_id: str, call: ToolCall, namespace: str | None, arguments: str | None = None
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(dict(call.arguments)) if arguments is None else arguments,
        "status": "completed" if arguments is None else "in_progress",
    }
    if namespace:  # a tool a `namespace` tool grouped: the client routes the call by both
        item["namespace"] = namespace
    return item


class ResponseWriter:
    """One response: its id, its object (whole, or as the stream's events with increasing
    `sequence_number`s), and remembering it once it ended (unless `store` is false)."""

    def __init__(self, turn: RunningTurn, asked: ResponsesAsk, memory: RememberedResponses) -> None:
        self.turn = turn
        self.asked = asked
        self.memory = memory
        self.id = _ident("resp")
        self.created_at = int(time.time())
        self._sequence = 0
        # The stream's state: the items done so far, the open item's id and its text.
        self._output: list[dict[str, Any]] = []
        self._open_id = ""
        self._text = ""

    # --- the object ----------------------------------------------------------------------------

    def envelope(self, status: str, output: list[dict[str, Any]], **rest: Any) -> dict[str, Any]:
        """The response object in `status` with `output`; `rest`: usage, error, details."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": rest.get("error"),
            "incomplete_details": rest.get("incomplete_details"),
            "model": self.turn.ask.model,
            "output": output,
            "usage": rest.get("usage"),
            **self.asked.echo,
        }

    def whole(self, message: AssistantMessage) -> dict[str, Any]:
        """The object of a turn that ended `done` (items read from its final message)."""
        sealed = SEALED_REASONING in self.asked.include
        output: list[dict[str, Any]] = []
        structured = self.turn.ask.json_schema is not None and self.turn.forced_call is None
        for block in message.content:
            if isinstance(block, ThinkingContent):
                signature = self.turn.sign(block.thinking) if sealed else None
                output.append(_reasoning(_ident("rs"), block.thinking, signature))
            elif isinstance(block, TextContent) and self.turn.ask.json_schema is None:
                output.append(_message(_ident("msg"), block.text))
            elif isinstance(block, ToolCall):
                output.append(_call(_ident("fc"), block, self.asked.namespaces.get(block.name)))
        if structured:
            output.append(_message(_ident("msg"), self.turn.structured_text))
        forced = self.turn.forced_call
        if forced is not None:
            output.append(_call(_ident("fc"), forced, self.asked.namespaces.get(forced.name)))
        return self._ended(message, output)

    def failed(self, message: AssistantMessage, failure: Failure) -> dict[str, Any]:
        status, text = failure(message)
        # A 429 is agy's quota: OpenAI's code for it, which Codex reports as such and does not
        # retry (it retries `server_error` five times, each a new agy turn).
        code = "insufficient_quota" if status == 429 else "server_error"
        response = self.envelope("failed", [], error={"code": code, "message": text})
        self._remember(response, None)
        return response

    def _ended(self, message: AssistantMessage, output: list[dict[str, Any]]) -> dict[str, Any]:
        finish = finish_reason(message, self.turn.forced_call)
        details = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(finish)
        response = self.envelope(
            "incomplete" if details else "completed",
            output,
            usage=responses_usage(message.usage),
            incomplete_details={"reason": details} if details else None,
        )
        response["completed_at"] = int(time.time())
        self._remember(response, message)
        return response

    def _remember(self, response: dict[str, Any], answer: AssistantMessage | None) -> None:
        if not self.asked.store:
            return
        transcript = self.asked.transcript
        if answer is not None:
            forced = self.turn.forced_call
            # The answer as the client holds it: a forced choice's call, never its JSON text.
            if forced is not None:
                blocks = [b for b in answer.content if not isinstance(b, TextContent)]
                answer = _with_content(answer, [*blocks, forced])
            transcript = (*transcript, answer)
        self.memory.remember(
            response,
            Continued(transcript, self.asked.system, self.turn.ask.session_key),
        )

    # --- the stream ----------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> _Frame:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return kind, event

    async def events(self, failure: Failure) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
        """(event name, data) of the streamed response, `response.created` to
        `response.completed` (or `.incomplete`, or `.failed` for a failed turn), in batches: the
        events one pi event makes go out together (one write, not one per event, so a text
        delta is not kept behind the item and part it opens)."""
        start = self.envelope("in_progress", [])
        yield [
            self._event("response.created", response=start),
            self._event("response.in_progress", response=start),
        ]
        async for event in self.turn.events():
            batch = self._translate(event, failure)
            if batch:
                yield batch

    def _translate(self, event: AssistantMessageEvent, failure: Failure) -> list[_Frame]:
        """The Responses events one pi event makes."""
        output = self._output
        where: dict[str, Any] = {"item_id": self._open_id, "output_index": len(output)}
        at: dict[str, Any]
        if isinstance(event, ThinkingStartEvent | TextStartEvent):
            return self._opened(isinstance(event, ThinkingStartEvent), len(output))
        if isinstance(event, ThinkingDeltaEvent | TextDeltaEvent) and event.delta:
            self._text += event.delta
            if isinstance(event, ThinkingDeltaEvent):
                kind, at = "response.reasoning_summary_text.delta", {"summary_index": 0}
            else:
                kind, at = "response.output_text.delta", {"content_index": 0, "logprobs": []}
            return [self._event(kind, **where, **at, delta=event.delta)]
        if isinstance(event, ThinkingEndEvent):
            sealed = SEALED_REASONING in self.asked.include
            signature = self.turn.sign(self._text) if sealed else None
            item = _reasoning(self._open_id, self._text, signature)
            at = {**where, "summary_index": 0}
            return [
                self._event("response.reasoning_summary_text.done", **at, text=self._text),
                self._event("response.reasoning_summary_part.done", **at, part=item["summary"][0]),
                *self._done(item),
            ]
        if isinstance(event, TextEndEvent):
            item = _message(self._open_id, self._text)
            at = {**where, "content_index": 0}
            return [
                self._event("response.output_text.done", **at, text=self._text, logprobs=[]),
                self._event("response.content_part.done", **at, part=item["content"][0]),
                *self._done(item),
            ]
        if isinstance(event, ToolCallEndEvent):
            return self._call_events(event.tool_call, output)
        if isinstance(event, DoneEvent):
            forced = self.turn.forced_call
            frames = self._call_events(forced, output) if forced is not None else []
            final = self._ended(event.message, output)
            return [*frames, self._event(f"response.{final['status']}", response=final)]
        if isinstance(event, ErrorEvent):
            final = self.failed(event.error, failure)
            final["output"] = output
            return [self._event("response.failed", response=final)]
        return []

    def _opened(self, thinking: bool, index: int) -> list[_Frame]:
        """A reasoning item and its summary part, or a message item and its text part."""
        self._open_id, self._text = _ident("rs" if thinking else "msg"), ""
        where = {"item_id": self._open_id, "output_index": index}
        at: dict[str, Any]
        if thinking:
            added: dict[str, Any] = {"id": self._open_id, "type": "reasoning", "summary": []}
            kind, at = "response.reasoning_summary_part.added", {"summary_index": 0}
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
        else:
            added = _message(self._open_id, None, "in_progress")
            kind, at, part = "response.content_part.added", {"content_index": 0}, _text_part("")
        return [
            self._event("response.output_item.added", output_index=index, item=added),
            self._event(kind, **where, **at, part=part),
        ]

    def _done(self, item: dict[str, Any]) -> list[_Frame]:
        self._output.append(item)
        return [
            self._event("response.output_item.done", output_index=len(self._output) - 1, item=item)
        ]

    def _call_events(self, call: ToolCall, output: list[dict[str, Any]]) -> list[_Frame]:
        """A function call's events, its arguments as one delta (agy's call arrives whole)."""
        index = len(output)
        item_id = _ident("fc")
        namespace = self.asked.namespaces.get(call.name)
        done = _call(item_id, call, namespace)
        where = {"item_id": item_id, "output_index": index}
        output.append(done)
        return [
            self._event(
                "response.output_item.added",
                output_index=index,
                item=_call(item_id, call, namespace, ""),
            ),
            self._event("response.function_call_arguments.delta", **where, delta=done["arguments"]),
            self._event(
                "response.function_call_arguments.done",
                **where,
                name=call.name,
                arguments=done["arguments"],
            ),
            self._event("response.output_item.done", output_index=index, item=done),
        ]


def _with_content(message: AssistantMessage, content: list[Any]) -> AssistantMessage:
    return dataclasses.replace(message, content=content, stop_reason="toolUse")
