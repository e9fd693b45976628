"""pi's data model: content blocks, usage and cost, messages, tools, context and models.

Owns their exact camelCase JSON (`to_json` / `from_json`); events and options have their own modules.

Field names and meanings follow `@mariozechner/pi-ai` (`packages/ai/src/types.ts` in
badlogic/pi-mono): a Python field `cache_read` is pi's `cacheRead`, optional fields that are `None`
are left out of the JSON the way pi's `undefined` fields are, and integral floats serialise as
integers the way `JSON.stringify` writes them. Sequences are stored as tuples so every value is
frozen and compares equal whether it was built from a list or a tuple. `from_json` ignores keys it
does not know and raises `DecodeError` when a key pi requires is missing or has the wrong type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeAlias, cast, get_args

from agy_provider.errors import DecodeError
from agy_provider.pi._pijson import (
    JsonDict,
    _bool,
    _dict,
    _int,
    _jnum,
    _list,
    _literal,
    _num,
    _obj,
    _opt_bool,
    _opt_dict,
    _opt_str,
    _present,
    _put,
    _str,
    _tag,
)
from agy_provider.pi.tool_run import ToolRun

__all__ = [
    "Api",
    "AssistantContent",
    "AssistantMessage",
    "Context",
    "Cost",
    "ImageContent",
    "InputKind",
    "Message",
    "Model",
    "ModelCost",
    "Provider",
    "StopReason",
    "TextContent",
    "ThinkingContent",
    "Tool",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserContent",
    "UserMessage",
    "content_from_json",
    "message_from_json",
]

Api: TypeAlias = str
Provider: TypeAlias = str
StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]
InputKind: TypeAlias = Literal["text", "image"]


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
    """The model's reasoning; `redacted` marks thinking a safety filter withheld.

    `tool_run` is set when the block is a tool run agy made (its text then renders the run);
    it is not part of pi's JSON, nor of equality.
    """

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None
    tool_run: ToolRun | None = field(default=None, compare=False)

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
