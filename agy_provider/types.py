"""pi's data model: models, context, messages, content blocks, usage and the 12 stream events.

Owns their exact camelCase JSON (`to_json` / `from_json`) and the `AbortSignal` that cancels a turn.

Field names and meanings follow `@mariozechner/pi-ai` (`packages/ai/src/types.ts` in
badlogic/pi-mono): a Python field `cache_read` is pi's `cacheRead`, optional fields that are `None`
are left out of the JSON the way pi's `undefined` fields are, and integral floats serialise as
integers the way `JSON.stringify` writes them. Sequences are stored as tuples so every value is
frozen and compares equal whether it was built from a list or a tuple. `from_json` ignores keys it
does not know and raises `DecodeError` when a key pi requires is missing or has the wrong type.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeAlias, cast, get_args

from .errors import DecodeError

__all__ = [
    "AbortSignal",
    "Api",
    "AssistantContent",
    "AssistantMessage",
    "AssistantMessageEvent",
    "CacheRetention",
    "Context",
    "Cost",
    "DoneEvent",
    "DoneReason",
    "ErrorEvent",
    "ErrorReason",
    "ImageContent",
    "InputKind",
    "JsonDict",
    "Message",
    "Model",
    "ModelCost",
    "Provider",
    "SimpleStreamOptions",
    "StartEvent",
    "StopReason",
    "StreamOptions",
    "TextContent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingBudgets",
    "ThinkingContent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingLevel",
    "ThinkingStartEvent",
    "Tool",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "ToolResultMessage",
    "Transport",
    "Usage",
    "UserContent",
    "UserMessage",
    "content_from_json",
    "event_from_json",
    "message_from_json",
]

JsonDict: TypeAlias = dict[str, Any]
Api: TypeAlias = str
Provider: TypeAlias = str
StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]
DoneReason: TypeAlias = Literal["stop", "length", "toolUse"]
ErrorReason: TypeAlias = Literal["aborted", "error"]
ThinkingLevel: TypeAlias = Literal["minimal", "low", "medium", "high", "xhigh"]
CacheRetention: TypeAlias = Literal["none", "short", "long"]
Transport: TypeAlias = Literal["sse", "websocket", "websocket-cached", "auto"]
InputKind: TypeAlias = Literal["text", "image"]


# --- decoding and encoding helpers -------------------------------------------------------------


def _obj(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DecodeError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _present(d: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise DecodeError(f"{what}: missing {key!r}")
    return d[key]


def _str(d: Mapping[str, Any], key: str, what: str) -> str:
    value = _present(d, key, what)
    if not isinstance(value, str):
        raise DecodeError(f"{what}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _opt_str(d: Mapping[str, Any], key: str, what: str) -> str | None:
    return None if d.get(key) is None else _str(d, key, what)


def _bool(d: Mapping[str, Any], key: str, what: str) -> bool:
    value = _present(d, key, what)
    if not isinstance(value, bool):
        raise DecodeError(f"{what}: {key!r} must be a boolean, got {type(value).__name__}")
    return value


def _opt_bool(d: Mapping[str, Any], key: str, what: str) -> bool | None:
    return None if d.get(key) is None else _bool(d, key, what)


def _num(d: Mapping[str, Any], key: str, what: str) -> float:
    value = _present(d, key, what)
    # bool is an int subclass, but `true` is not a number in pi's JSON.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DecodeError(f"{what}: {key!r} must be a number, got {type(value).__name__}")
    return value


def _opt_num(d: Mapping[str, Any], key: str, what: str) -> float | None:
    return None if d.get(key) is None else _num(d, key, what)


def _int(d: Mapping[str, Any], key: str, what: str) -> int:
    value = _num(d, key, what)
    if isinstance(value, float):
        # JavaScript has one number type, so another writer may send 12.0 for a count.
        if not value.is_integer():
            raise DecodeError(f"{what}: {key!r} must be an integer, got {value!r}")
        return int(value)
    return value


def _opt_int(d: Mapping[str, Any], key: str, what: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, what)


def _list(d: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = _present(d, key, what)
    if not isinstance(value, list | tuple):
        raise DecodeError(f"{what}: {key!r} must be an array, got {type(value).__name__}")
    return list(value)


def _dict(d: Mapping[str, Any], key: str, what: str) -> JsonDict:
    return dict(_obj(_present(d, key, what), f"{what}.{key}"))


def _opt_dict(d: Mapping[str, Any], key: str, what: str) -> JsonDict | None:
    return None if d.get(key) is None else _dict(d, key, what)


def _literal(d: Mapping[str, Any], key: str, what: str, allowed: Any) -> Any:
    value = _present(d, key, what)
    choices = get_args(allowed)
    if value not in choices:
        raise DecodeError(f"{what}: {key!r} must be one of {list(choices)}, got {value!r}")
    return value


def _opt_literal(d: Mapping[str, Any], key: str, what: str, allowed: Any) -> Any:
    return None if d.get(key) is None else _literal(d, key, what, allowed)


def _tag(d: Mapping[str, Any], key: str, expected: str, what: str) -> None:
    if d.get(key) != expected:
        raise DecodeError(f"{what}: expected {key} {expected!r}, got {d.get(key)!r}")


def _jnum(value: float) -> float:
    """A number as `JSON.stringify` would write it: 3.0 becomes 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _put(out: JsonDict, key: str, value: object) -> None:
    if value is not None:
        out[key] = value


# --- content blocks ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextContent:
    """Text the model said; pi's `{"type": "text", "text", "textSignature"?}`."""

    type: ClassVar[Literal["text"]] = "text"
    text: str
    text_signature: str | None = None

    def to_json(self) -> JsonDict:
        out: JsonDict = {"type": "text", "text": self.text}
        _put(out, "textSignature", self.text_signature)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "text content")
        _tag(d, "type", "text", "text content")
        return cls(_str(d, "text", "text"), _opt_str(d, "textSignature", "text"))


@dataclass(frozen=True, slots=True)
class ThinkingContent:
    """The model's reasoning; `redacted` marks thinking a safety filter withheld."""

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None

    def to_json(self) -> JsonDict:
        out: JsonDict = {"type": "thinking", "thinking": self.thinking}
        _put(out, "thinkingSignature", self.thinking_signature)
        _put(out, "redacted", self.redacted)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "thinking content")
        _tag(d, "type", "thinking", "thinking content")
        return cls(
            _str(d, "thinking", "thinking"),
            _opt_str(d, "thinkingSignature", "thinking"),
            _opt_bool(d, "redacted", "thinking"),
        )


@dataclass(frozen=True, slots=True)
class ImageContent:
    """An image as base64 `data` with its `mime_type` (pi's `mimeType`)."""

    type: ClassVar[Literal["image"]] = "image"
    data: str
    mime_type: str

    def to_json(self) -> JsonDict:
        return {"type": "image", "data": self.data, "mimeType": self.mime_type}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "image content")
        _tag(d, "type", "image", "image content")
        return cls(_str(d, "data", "image"), _str(d, "mimeType", "image"))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model asks the host to run; `arguments` is the parsed JSON object."""

    type: ClassVar[Literal["toolCall"]] = "toolCall"
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    thought_signature: str | None = None

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "type": "toolCall",
            "id": self.id,
            "name": self.name,
            "arguments": dict(self.arguments),
        }
        _put(out, "thoughtSignature", self.thought_signature)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "tool call")
        _tag(d, "type", "toolCall", "tool call")
        return cls(
            _str(d, "id", "toolCall"),
            _str(d, "name", "toolCall"),
            _dict(d, "arguments", "toolCall"),
            _opt_str(d, "thoughtSignature", "toolCall"),
        )


AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall
UserContent: TypeAlias = TextContent | ImageContent

_CONTENT_TYPES: dict[str, Callable[[Mapping[str, Any]], AssistantContent | ImageContent]] = {
    "text": TextContent.from_json,
    "thinking": ThinkingContent.from_json,
    "image": ImageContent.from_json,
    "toolCall": ToolCall.from_json,
}


def content_from_json(
    data: Mapping[str, Any],
) -> TextContent | ThinkingContent | ImageContent | ToolCall:
    """Decode any content block by its `type`. Raises `DecodeError` for an unknown type."""
    d = _obj(data, "content block")
    decode = _CONTENT_TYPES.get(d.get("type"))  # type: ignore[arg-type]
    if decode is None:
        raise DecodeError(f"content block: unknown type {d.get('type')!r}")
    return decode(d)


def _content_list(
    d: Mapping[str, Any], key: str, what: str, allowed: tuple[type, ...]
) -> tuple[Any, ...]:
    blocks = tuple(content_from_json(item) for item in _list(d, key, what))
    for block in blocks:
        if not isinstance(block, allowed):
            raise DecodeError(f"{what}: a {block.type!r} block is not allowed in {key!r}")
    return blocks


# --- usage -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cost:
    """What a response cost, in dollars, split like the token counts; `total` is their sum."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0
    total: float = 0

    def to_json(self) -> JsonDict:
        return {
            "input": _jnum(self.input),
            "output": _jnum(self.output),
            "cacheRead": _jnum(self.cache_read),
            "cacheWrite": _jnum(self.cache_write),
            "total": _jnum(self.total),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "cost")
        return cls(
            _num(d, "input", "cost"),
            _num(d, "output", "cost"),
            _num(d, "cacheRead", "cost"),
            _num(d, "cacheWrite", "cost"),
            _num(d, "total", "cost"),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts: `input` uncached, `cache_read` cached, `total_tokens` the sum of all four."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = field(default_factory=Cost)

    def to_json(self) -> JsonDict:
        return {
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "totalTokens": self.total_tokens,
            "cost": self.cost.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "usage")
        return cls(
            _int(d, "input", "usage"),
            _int(d, "output", "usage"),
            _int(d, "cacheRead", "usage"),
            _int(d, "cacheWrite", "usage"),
            _int(d, "totalTokens", "usage"),
            Cost.from_json(_present(d, "cost", "usage")),
        )


# --- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    """What the user said: a plain string or text and image blocks. `timestamp` is Unix ms."""

    role: ClassVar[Literal["user"]] = "user"
    content: str | Sequence[UserContent]
    timestamp: int

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            object.__setattr__(self, "content", tuple(self.content))

    def to_json(self) -> JsonDict:
        content = self.content
        return {
            "role": "user",
            "content": content if isinstance(content, str) else [c.to_json() for c in content],
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "user message")
        _tag(d, "role", "user", "user message")
        raw = _present(d, "content", "user message")
        content: str | Sequence[UserContent]
        if isinstance(raw, str):
            content = raw
        else:
            content = _content_list(d, "content", "user message", (TextContent, ImageContent))
        return cls(content=content, timestamp=_int(d, "timestamp", "user message"))


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """One model response: its blocks, who produced it, usage and why it stopped.

    `error_message` is set when `stop_reason` is "error" or "aborted". `response_model`,
    `response_id` and `diagnostics` are pi's optional provider extras, kept as given.
    """

    role: ClassVar[Literal["assistant"]] = "assistant"
    content: Sequence[AssistantContent]
    api: Api
    provider: Provider
    model: str
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason
    timestamp: int
    error_message: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    diagnostics: Sequence[JsonDict] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        if self.diagnostics is not None:
            object.__setattr__(self, "diagnostics", tuple(self.diagnostics))

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "role": "assistant",
            "content": [c.to_json() for c in self.content],
            "api": self.api,
            "provider": self.provider,
            "model": self.model,
        }
        _put(out, "responseModel", self.response_model)
        _put(out, "responseId", self.response_id)
        if self.diagnostics is not None:
            out["diagnostics"] = [dict(item) for item in self.diagnostics]
        out["usage"] = self.usage.to_json()
        out["stopReason"] = self.stop_reason
        _put(out, "errorMessage", self.error_message)
        out["timestamp"] = self.timestamp
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = "assistant message"
        d = _obj(data, what)
        _tag(d, "role", "assistant", what)
        diagnostics = None
        if d.get("diagnostics") is not None:
            diagnostics = [dict(_obj(x, "diagnostic")) for x in _list(d, "diagnostics", what)]
        return cls(
            content=_content_list(d, "content", what, (TextContent, ThinkingContent, ToolCall)),
            api=_str(d, "api", what),
            provider=_str(d, "provider", what),
            model=_str(d, "model", what),
            response_model=_opt_str(d, "responseModel", what),
            response_id=_opt_str(d, "responseId", what),
            diagnostics=diagnostics,
            usage=Usage.from_json(_present(d, "usage", what)),
            stop_reason=_literal(d, "stopReason", what, StopReason),
            error_message=_opt_str(d, "errorMessage", what),
            timestamp=_int(d, "timestamp", what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultMessage:
    """The host's answer to a `ToolCall`; `details` is any JSON the tool wants to keep aside."""

    role: ClassVar[Literal["toolResult"]] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: Sequence[UserContent]
    is_error: bool = False
    details: Any = None
    timestamp: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "role": "toolResult",
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "content": [c.to_json() for c in self.content],
        }
        _put(out, "details", self.details)
        out["isError"] = self.is_error
        out["timestamp"] = self.timestamp
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = "tool result message"
        d = _obj(data, what)
        _tag(d, "role", "toolResult", what)
        return cls(
            tool_call_id=_str(d, "toolCallId", what),
            tool_name=_str(d, "toolName", what),
            content=_content_list(d, "content", what, (TextContent, ImageContent)),
            details=d.get("details"),
            is_error=_bool(d, "isError", what),
            timestamp=_int(d, "timestamp", what),
        )


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage

_MESSAGE_ROLES: dict[str, Callable[[Mapping[str, Any]], Message]] = {
    "user": UserMessage.from_json,
    "assistant": AssistantMessage.from_json,
    "toolResult": ToolResultMessage.from_json,
}


def message_from_json(data: Mapping[str, Any]) -> Message:
    """Decode any message by its `role`. Raises `DecodeError` for an unknown role."""
    d = _obj(data, "message")
    decode = _MESSAGE_ROLES.get(d.get("role"))  # type: ignore[arg-type]
    if decode is None:
        raise DecodeError(f"message: unknown role {d.get('role')!r}")
    return decode(d)


# --- tools, context, models --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the host offers: `parameters` is its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> JsonDict:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "tool")
        return cls(
            _str(d, "name", "tool"), _str(d, "description", "tool"), _dict(d, "parameters", "tool")
        )


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a turn sees: the system prompt, the conversation so far and the host's tools."""

    system_prompt: str | None = None
    messages: Sequence[Message] = ()
    tools: Sequence[Tool] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))

    def to_json(self) -> JsonDict:
        out: JsonDict = {}
        _put(out, "systemPrompt", self.system_prompt)
        out["messages"] = [m.to_json() for m in self.messages]
        if self.tools is not None:
            out["tools"] = [t.to_json() for t in self.tools]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "context")
        tools = None
        if d.get("tools") is not None:
            tools = [Tool.from_json(t) for t in _list(d, "tools", "context")]
        return cls(
            _opt_str(d, "systemPrompt", "context"),
            [message_from_json(m) for m in _list(d, "messages", "context")],
            tools,
        )


@dataclass(frozen=True, slots=True)
class ModelCost:
    """A model's prices in dollars per million tokens (pi's `Model.cost`, which has no total)."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0

    def to_json(self) -> JsonDict:
        return {
            "input": _jnum(self.input),
            "output": _jnum(self.output),
            "cacheRead": _jnum(self.cache_read),
            "cacheWrite": _jnum(self.cache_write),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "model cost")
        return cls(
            _num(d, "input", "model cost"),
            _num(d, "output", "model cost"),
            _num(d, "cacheRead", "model cost"),
            _num(d, "cacheWrite", "model cost"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """A model a provider can run, as pi describes it.

    `reasoning` says whether it thinks; `input` lists what it reads ("text", "image");
    `thinking_level_map` and `compat` are pi's provider-specific extras, kept as given.
    """

    id: str
    name: str
    api: Api
    provider: Provider
    base_url: str
    reasoning: bool
    input: Sequence[InputKind] = ("text",)
    cost: ModelCost = field(default_factory=ModelCost)
    context_window: int
    max_tokens: int
    headers: Mapping[str, str] | None = None
    thinking_level_map: Mapping[str, str | None] | None = None
    compat: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", tuple(self.input))

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "id": self.id,
            "name": self.name,
            "api": self.api,
            "provider": self.provider,
            "baseUrl": self.base_url,
            "reasoning": self.reasoning,
        }
        if self.thinking_level_map is not None:
            out["thinkingLevelMap"] = dict(self.thinking_level_map)
        out["input"] = list(self.input)
        out["cost"] = self.cost.to_json()
        out["contextWindow"] = self.context_window
        out["maxTokens"] = self.max_tokens
        if self.headers is not None:
            out["headers"] = dict(self.headers)
        if self.compat is not None:
            out["compat"] = dict(self.compat)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "model")
        kinds = _list(d, "input", "model")
        for kind in kinds:
            if kind not in get_args(InputKind):
                raise DecodeError(f"model: unknown input kind {kind!r}")
        return cls(
            id=_str(d, "id", "model"),
            name=_str(d, "name", "model"),
            api=_str(d, "api", "model"),
            provider=_str(d, "provider", "model"),
            base_url=_str(d, "baseUrl", "model"),
            reasoning=_bool(d, "reasoning", "model"),
            thinking_level_map=_opt_dict(d, "thinkingLevelMap", "model"),
            input=cast(list[InputKind], kinds),
            cost=ModelCost.from_json(_present(d, "cost", "model")),
            context_window=_int(d, "contextWindow", "model"),
            max_tokens=_int(d, "maxTokens", "model"),
            headers=_opt_dict(d, "headers", "model"),
            compat=_opt_dict(d, "compat", "model"),
        )


# --- options and abort -------------------------------------------------------------------------


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AbortSignal:
    """A one-way flag that cancels a turn, like the web's AbortSignal.

    `abort()` may be called from any thread; every coroutine in `wait()` wakes on its own loop.
    """

    __slots__ = ("_aborted", "_lock", "_reason", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._reason: object = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def aborted(self) -> bool:
        """True once `abort()` has been called."""
        return self._aborted

    @property
    def reason(self) -> object:
        """What `abort()` was given, or None."""
        return self._reason

    def abort(self, reason: object = None) -> None:
        """Raise the flag and wake every waiter. Later calls change nothing."""
        with self._lock:
            if self._aborted:
                return
            self._reason = reason
            self._aborted = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A closed loop raises here; nothing on it can still be waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    async def wait(self) -> None:
        """Return once the signal is aborted (at once if it already is)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._aborted:
                return
            self._waiters.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self._aborted}, reason={self._reason!r})"


@dataclass(frozen=True, slots=True)
class ThinkingBudgets:
    """Token budgets per thinking level, for providers that budget thinking in tokens."""

    minimal: int | None = None
    low: int | None = None
    medium: int | None = None
    high: int | None = None

    def to_json(self) -> JsonDict:
        out: JsonDict = {}
        for key in ("minimal", "low", "medium", "high"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "thinking budgets")
        return cls(
            *(_opt_int(d, key, "thinking budgets") for key in ("minimal", "low", "medium", "high"))
        )


# (python field, pi key) for StreamOptions' JSON-valued fields; `signal` and pi's callbacks
# (onPayload, onResponse) are live objects and have no JSON form.
_STREAM_OPTION_KEYS = (
    ("temperature", "temperature"),
    ("max_tokens", "maxTokens"),
    ("api_key", "apiKey"),
    ("transport", "transport"),
    ("cache_retention", "cacheRetention"),
    ("session_id", "sessionId"),
    ("headers", "headers"),
    ("timeout_ms", "timeoutMs"),
    ("max_retries", "maxRetries"),
    ("max_retry_delay_ms", "maxRetryDelayMs"),
    ("metadata", "metadata"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """Options every pi provider accepts; `signal` aborts the turn. `api_key` stays out of repr."""

    temperature: float | None = None
    max_tokens: int | None = None
    signal: AbortSignal | None = field(default=None, compare=False)
    api_key: str | None = field(default=None, repr=False)
    transport: Transport | None = None
    cache_retention: CacheRetention | None = None
    session_id: str | None = None
    headers: Mapping[str, str] | None = None
    timeout_ms: int | None = None
    max_retries: int | None = None
    max_retry_delay_ms: int | None = None
    metadata: Mapping[str, Any] | None = None

    def to_json(self) -> JsonDict:
        """pi's JSON for the options, without `signal` (a live object)."""
        out: JsonDict = {}
        for attr, key in _STREAM_OPTION_KEYS:
            value = getattr(self, attr)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, float):
                value = _jnum(value)
            _put(out, key, value)
        return out

    @classmethod
    def _fields_from_json(cls, d: Mapping[str, Any], what: str) -> JsonDict:
        return {
            "temperature": _opt_num(d, "temperature", what),
            "max_tokens": _opt_int(d, "maxTokens", what),
            "api_key": _opt_str(d, "apiKey", what),
            "transport": _opt_literal(d, "transport", what, Transport),
            "cache_retention": _opt_literal(d, "cacheRetention", what, CacheRetention),
            "session_id": _opt_str(d, "sessionId", what),
            "headers": _opt_dict(d, "headers", what),
            "timeout_ms": _opt_int(d, "timeoutMs", what),
            "max_retries": _opt_int(d, "maxRetries", what),
            "max_retry_delay_ms": _opt_int(d, "maxRetryDelayMs", what),
            "metadata": _opt_dict(d, "metadata", what),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, signal: AbortSignal | None = None) -> Self:
        d = _obj(data, "stream options")
        return cls(signal=signal, **cls._fields_from_json(d, "stream options"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleStreamOptions(StreamOptions):
    """`stream_simple` options: pi's StreamOptions plus a thinking level and token budgets."""

    reasoning: ThinkingLevel | None = None
    thinking_budgets: ThinkingBudgets | None = None

    def to_json(self) -> JsonDict:
        out = StreamOptions.to_json(self)
        _put(out, "reasoning", self.reasoning)
        if self.thinking_budgets is not None:
            out["thinkingBudgets"] = self.thinking_budgets.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, signal: AbortSignal | None = None) -> Self:
        what = "stream options"
        d = _obj(data, what)
        budgets = d.get("thinkingBudgets")
        return cls(
            signal=signal,
            reasoning=_opt_literal(d, "reasoning", what, ThinkingLevel),
            thinking_budgets=None if budgets is None else ThinkingBudgets.from_json(budgets),
            **cls._fields_from_json(d, what),
        )


# --- the 12 stream events ----------------------------------------------------------------------
#
# Every event but done/error carries `partial`, the message as built so far. `to_json` takes
# `include_partial=False` so replays can print events without repeating the whole message.


def _partial(d: Mapping[str, Any], what: str) -> AssistantMessage:
    return AssistantMessage.from_json(_present(d, "partial", what))


def _event_json(out: JsonDict, partial: AssistantMessage, include_partial: bool) -> JsonDict:
    if include_partial:
        out["partial"] = partial.to_json()
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class StartEvent:
    """The response has begun."""

    type: ClassVar[Literal["start"]] = "start"
    partial: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        return _event_json({"type": self.type}, self.partial, include_partial)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "start event")
        _tag(d, "type", cls.type, "event")
        return cls(partial=_partial(d, "start event"))


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockStart:
    type: ClassVar[str]
    content_index: int
    partial: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        out: JsonDict = {"type": self.type, "contentIndex": self.content_index}
        return _event_json(out, self.partial, include_partial)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = f"{cls.type} event"
        d = _obj(data, what)
        _tag(d, "type", cls.type, "event")
        return cls(content_index=_int(d, "contentIndex", what), partial=_partial(d, what))


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockDelta:
    type: ClassVar[str]
    content_index: int
    delta: str
    partial: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        out: JsonDict = {"type": self.type, "contentIndex": self.content_index, "delta": self.delta}
        return _event_json(out, self.partial, include_partial)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = f"{cls.type} event"
        d = _obj(data, what)
        _tag(d, "type", cls.type, "event")
        return cls(
            content_index=_int(d, "contentIndex", what),
            delta=_str(d, "delta", what),
            partial=_partial(d, what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockEnd:
    type: ClassVar[str]
    content_index: int
    content: str
    partial: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        out: JsonDict = {
            "type": self.type,
            "contentIndex": self.content_index,
            "content": self.content,
        }
        return _event_json(out, self.partial, include_partial)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = f"{cls.type} event"
        d = _obj(data, what)
        _tag(d, "type", cls.type, "event")
        return cls(
            content_index=_int(d, "contentIndex", what),
            content=_str(d, "content", what),
            partial=_partial(d, what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TextStartEvent(_BlockStart):
    """A text block opened at `content_index`."""

    type: ClassVar[Literal["text_start"]] = "text_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDeltaEvent(_BlockDelta):
    """Text appended to the block at `content_index`."""

    type: ClassVar[Literal["text_delta"]] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEndEvent(_BlockEnd):
    """The text block at `content_index` is complete; `content` is its whole text."""

    type: ClassVar[Literal["text_end"]] = "text_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingStartEvent(_BlockStart):
    """A thinking block opened at `content_index`."""

    type: ClassVar[Literal["thinking_start"]] = "thinking_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDeltaEvent(_BlockDelta):
    """Thinking appended to the block at `content_index`."""

    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingEndEvent(_BlockEnd):
    """The thinking block at `content_index` is complete; `content` is its whole thinking."""

    type: ClassVar[Literal["thinking_end"]] = "thinking_end"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStartEvent(_BlockStart):
    """A tool call opened at `content_index`."""

    type: ClassVar[Literal["toolcall_start"]] = "toolcall_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDeltaEvent(_BlockDelta):
    """More of the tool call's arguments JSON, as raw text."""

    type: ClassVar[Literal["toolcall_delta"]] = "toolcall_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEndEvent:
    """The tool call at `content_index` is complete; `tool_call` is the finished call."""

    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"
    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        out: JsonDict = {
            "type": self.type,
            "contentIndex": self.content_index,
            "toolCall": self.tool_call.to_json(),
        }
        return _event_json(out, self.partial, include_partial)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        what = "toolcall_end event"
        d = _obj(data, what)
        _tag(d, "type", cls.type, "event")
        return cls(
            content_index=_int(d, "contentIndex", what),
            tool_call=ToolCall.from_json(_present(d, "toolCall", what)),
            partial=_partial(d, what),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DoneEvent:
    """The response finished; `message` is final and `reason` is its stop reason."""

    type: ClassVar[Literal["done"]] = "done"
    reason: DoneReason
    message: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        """pi's JSON; `include_partial` is accepted for symmetry (done has no `partial`)."""
        return {"type": self.type, "reason": self.reason, "message": self.message.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "done event")
        _tag(d, "type", cls.type, "event")
        return cls(
            reason=_literal(d, "reason", "done event", DoneReason),
            message=AssistantMessage.from_json(_present(d, "message", "done event")),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """The response failed or was aborted; `error` is the final message, whose
    `error_message` says what went wrong."""

    type: ClassVar[Literal["error"]] = "error"
    reason: ErrorReason
    error: AssistantMessage

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        """pi's JSON; `include_partial` is accepted for symmetry (error has no `partial`)."""
        return {"type": self.type, "reason": self.reason, "error": self.error.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "error event")
        _tag(d, "type", cls.type, "event")
        return cls(
            reason=_literal(d, "reason", "error event", ErrorReason),
            error=AssistantMessage.from_json(_present(d, "error", "error event")),
        )


AssistantMessageEvent: TypeAlias = (
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent
)

_EVENT_TYPES: dict[str, Callable[[Mapping[str, Any]], AssistantMessageEvent]] = {
    cls.type: cls.from_json
    for cls in (
        StartEvent,
        TextStartEvent,
        TextDeltaEvent,
        TextEndEvent,
        ThinkingStartEvent,
        ThinkingDeltaEvent,
        ThinkingEndEvent,
        ToolCallStartEvent,
        ToolCallDeltaEvent,
        ToolCallEndEvent,
        DoneEvent,
        ErrorEvent,
    )
}


def event_from_json(data: Mapping[str, Any]) -> AssistantMessageEvent:
    """Decode any of the 12 events by its `type`. Raises `DecodeError` for an unknown type."""
    d = _obj(data, "event")
    decode = _EVENT_TYPES.get(d.get("type"))  # type: ignore[arg-type]
    if decode is None:
        raise DecodeError(f"event: unknown type {d.get('type')!r}")
    return decode(d)
