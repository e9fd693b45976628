"""pi's 12 stream events, the `AssistantMessageEvent` union and `event_from_json`.

Owns their camelCase JSON (as in `types`), with or without the `partial` message.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import ClassVar
from typing import Literal
from typing import TypeAlias

from agy_provider.pi._pijson import INT
from agy_provider.pi._pijson import STR
from agy_provider.pi._pijson import JsonDict
from agy_provider.pi._pijson import JsonShape
from agy_provider.pi._pijson import Kind
from agy_provider.pi._pijson import PiJson
from agy_provider.pi._pijson import by_tag
from agy_provider.pi._pijson import literal
from agy_provider.pi._pijson import nested
from agy_provider.pi.tool_run import ToolRun
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import ToolCall

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


# Every event but done/error carries `partial`, the message as built so far, as its last key.
# `to_json` takes `include_partial=False` so replays can print events without repeating the whole
# message. Errors name the event ("text_delta event: missing 'delta'").
_PARTIAL = nested(AssistantMessage)


def _event(**fields: Kind) -> JsonShape:
    return JsonShape("{tag} event", fields, tag="type", tag_what="event")


class _Event(PiJson):
    __slots__ = ()

    def to_json(self, *, include_partial: bool = True) -> JsonDict:
        """pi's JSON; without `partial` when `include_partial` is False."""
        return self._json.write(self, omit="" if include_partial else "partial")


@dataclass(frozen=True, slots=True, kw_only=True)
class StartEvent(_Event):
    """The response has begun."""

    type: ClassVar[Literal["start"]] = "start"
    partial: AssistantMessage

    _json = _event(partial=_PARTIAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockStart(_Event):
    type: ClassVar[str]
    content_index: int
    partial: AssistantMessage

    _json = _event(content_index=INT, partial=_PARTIAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockDelta(_Event):
    type: ClassVar[str]
    content_index: int
    delta: str
    partial: AssistantMessage

    _json = _event(content_index=INT, delta=STR, partial=_PARTIAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class _BlockEnd(_Event):
    type: ClassVar[str]
    content_index: int
    content: str
    partial: AssistantMessage

    _json = _event(content_index=INT, content=STR, partial=_PARTIAL)


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


# The three thinking events carry the tool run their block shows. This base is not slotted (two
# slotted bases would clash in layout); listed first, it puts `tool_run` after the block's fields.
@dataclass(frozen=True, kw_only=True)
class _ThinkingEvent:
    """`tool_run`: the tool run the block is, as known at this event (not in pi's JSON)."""

    __slots__ = ()
    tool_run: ToolRun | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingStartEvent(_ThinkingEvent, _BlockStart):
    """A thinking block opened at `content_index`; `tool_run` is the run it shows."""

    type: ClassVar[Literal["thinking_start"]] = "thinking_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDeltaEvent(_ThinkingEvent, _BlockDelta):
    """Thinking appended to the block at `content_index`; `tool_run` is the run it shows."""

    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingEndEvent(_ThinkingEvent, _BlockEnd):
    """The thinking block at `content_index` is complete; `content` is its whole thinking.

    `tool_run` is the run it shows.
    """

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
class ToolCallEndEvent(_Event):
    """The tool call at `content_index` is complete; `tool_call` is the finished call."""

    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"
    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage

    _json = _event(content_index=INT, tool_call=nested(ToolCall), partial=_PARTIAL)


# done and error have no `partial`: `include_partial` is accepted for symmetry.


@dataclass(frozen=True, slots=True, kw_only=True)
class DoneEvent(_Event):
    """The response finished; `message` is final and `reason` is its stop reason."""

    type: ClassVar[Literal["done"]] = "done"
    reason: DoneReason
    message: AssistantMessage

    _json = _event(reason=literal(DoneReason), message=nested(AssistantMessage))


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(_Event):
    """The response failed or was aborted; `error` is the final message, whose
    `error_message` says what went wrong."""

    type: ClassVar[Literal["error"]] = "error"
    reason: ErrorReason
    error: AssistantMessage

    _json = _event(reason=literal(ErrorReason), error=nested(AssistantMessage))


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
    return by_tag(data, "event", "type", _EVENT_TYPES)
