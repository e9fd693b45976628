"""pi's 12 stream events, the `AssistantMessageEvent` union and `event_from_json`.

Owns their camelCase JSON (as in `types`), with or without the `partial` message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeAlias

from agy_provider.errors import DecodeError
from agy_provider.pi._pijson import JsonDict, _int, _literal, _obj, _present, _str, _tag
from agy_provider.pi.tool_run import ToolRun
from agy_provider.pi.types import AssistantMessage, ToolCall

__all__ = [
    "AssistantMessageEvent",
    "DoneEvent",
    "DoneReason",
    "ErrorEvent",
    "ErrorReason",
    "StartEvent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "event_from_json",
]

DoneReason: TypeAlias = Literal["stop", "length", "toolUse"]
ErrorReason: TypeAlias = Literal["aborted", "error"]


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
    """A thinking block opened at `content_index`.

    `tool_run`: the tool run the block is, as known at this event (not in pi's JSON).
    """

    type: ClassVar[Literal["thinking_start"]] = "thinking_start"
    tool_run: ToolRun | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDeltaEvent(_BlockDelta):
    """Thinking appended to the block at `content_index`.

    `tool_run`: the tool run the block is, as known at this event (not in pi's JSON).
    """

    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"
    tool_run: ToolRun | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingEndEvent(_BlockEnd):
    """The thinking block at `content_index` is complete; `content` is its whole thinking.

    `tool_run`: the tool run the block is, as known at this event (not in pi's JSON).
    """

    type: ClassVar[Literal["thinking_end"]] = "thinking_end"
    tool_run: ToolRun | None = field(default=None, compare=False)


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
