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

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import ClassVar
from typing import Generic
from typing import Literal
from typing import TypeAlias
from typing import TypeVar
from typing import get_args

from agy_provider.errors import DecodeError
from agy_provider.pi._pijson import BOOL
from agy_provider.pi._pijson import DICT
from agy_provider.pi._pijson import INT
from agy_provider.pi._pijson import KEPT
from agy_provider.pi._pijson import NUM
from agy_provider.pi._pijson import OPT_BOOL
from agy_provider.pi._pijson import OPT_DICT
from agy_provider.pi._pijson import OPT_STR
from agy_provider.pi._pijson import STR
from agy_provider.pi._pijson import JsonDict
from agy_provider.pi._pijson import JsonShape
from agy_provider.pi._pijson import Kind
from agy_provider.pi._pijson import PiJson
from agy_provider.pi._pijson import by_tag
from agy_provider.pi._pijson import items
from agy_provider.pi._pijson import json_object
from agy_provider.pi._pijson import list_field
from agy_provider.pi._pijson import literal
from agy_provider.pi._pijson import nested
from agy_provider.pi._pijson import present
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
class TextContent(PiJson):
    """Text the model said; pi's `{"type": "text", "text", "textSignature"?}`."""

    type: ClassVar[Literal["text"]] = "text"
    text: str
    text_signature: str | None = None

    _json = JsonShape(
        "text content", tag="type", field_what="{tag}", text=STR, text_signature=OPT_STR
    )


@dataclass(frozen=True, slots=True)
class ThinkingContent(PiJson):
    """The model's reasoning; `redacted` marks thinking a safety filter withheld.

    `tool_run` is set when the block is a tool run agy made (its text then renders the run);
    it is not part of pi's JSON, nor of equality.
    """

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None
    tool_run: ToolRun | None = field(default=None, compare=False)

    _json = JsonShape(
        "thinking content",
        tag="type",
        field_what="{tag}",
        thinking=STR,
        thinking_signature=OPT_STR,
        redacted=OPT_BOOL,
    )


@dataclass(frozen=True, slots=True)
class ImageContent(PiJson):
    """An image as base64 `data` with its `mime_type` (pi's `mimeType`)."""

    type: ClassVar[Literal["image"]] = "image"
    data: str
    mime_type: str

    _json = JsonShape("image content", tag="type", field_what="{tag}", data=STR, mime_type=STR)


@dataclass(frozen=True, slots=True)
class ToolCall(PiJson):
    """A call the model asks the host to run; `arguments` is the parsed JSON object."""

    type: ClassVar[Literal["toolCall"]] = "toolCall"
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    thought_signature: str | None = None

    _json = JsonShape(
        "tool call",
        tag="type",
        field_what="{tag}",
        id=STR,
        name=STR,
        arguments=DICT,
        thought_signature=OPT_STR,
    )


AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall
UserContent: TypeAlias = TextContent | ImageContent

_CONTENT_TYPES: dict[str, Callable[[Mapping[str, Any]], AssistantContent | ImageContent]] = {
    block.type: block.from_json for block in (TextContent, ThinkingContent, ImageContent, ToolCall)
}


def content_from_json(
    data: Mapping[str, Any],
) -> TextContent | ThinkingContent | ImageContent | ToolCall:
    """Decode any content block by its `type`. Raises `DecodeError` for an unknown type."""
    return by_tag(data, "content block", "type", _CONTENT_TYPES)


def _blocks(*allowed: type) -> Kind:
    """An array of content blocks of the `allowed` classes."""
    any_block = items(content_from_json)

    def read(d: Mapping[str, Any], key: str, what: str) -> tuple[Any, ...]:
        blocks = tuple(any_block.read(d, key, what))
        for block in blocks:
            if not isinstance(block, allowed):
                raise DecodeError(f"{what}: a {block.type!r} block is not allowed in {key!r}")
        return blocks

    return Kind(read, any_block.write)


# --- usage -------------------------------------------------------------------------------------

_Amount = TypeVar("_Amount", int, float)


@dataclass(frozen=True, slots=True)
class _Split(PiJson, Generic[_Amount]):
    """Amounts split the way pi splits a call's tokens: uncached input, output, cache reads and
    cache writes; token counts in `Usage`, dollars in `Cost` and `ModelCost`."""

    input: _Amount = 0
    output: _Amount = 0
    cache_read: _Amount = 0
    cache_write: _Amount = 0


def _split(kind: Kind) -> dict[str, Kind]:
    return dict.fromkeys(("input", "output", "cache_read", "cache_write"), kind)


@dataclass(frozen=True, slots=True)
class Cost(_Split[float]):
    """What a response cost, in dollars, split like the token counts; `total` is their sum."""

    total: float = 0

    _json = JsonShape("cost", _split(NUM), total=NUM)


@dataclass(frozen=True, slots=True)
class Usage(_Split[int]):
    """Token counts: `input` uncached, `cache_read` cached, `total_tokens` the sum of all four."""

    total_tokens: int = 0
    cost: Cost = field(default_factory=Cost)

    _json = JsonShape("usage", _split(INT), total_tokens=INT, cost=nested(Cost))


# --- messages ----------------------------------------------------------------------------------

_USER_BLOCKS = _blocks(TextContent, ImageContent)


def _user_content(d: Mapping[str, Any], key: str, what: str) -> str | tuple[Any, ...]:
    raw = present(d, key, what)
    return raw if isinstance(raw, str) else _USER_BLOCKS.read(d, key, what)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage(PiJson):
    """What the user said: a plain string or text and image blocks. `timestamp` is Unix ms."""

    role: ClassVar[Literal["user"]] = "user"
    content: str | Sequence[UserContent]
    timestamp: int

    _json = JsonShape(
        "user message",
        tag="role",
        content=Kind(_user_content, lambda c: c if isinstance(c, str) else _USER_BLOCKS.write(c)),
        timestamp=INT,
    )

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            object.__setattr__(self, "content", tuple(self.content))


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage(PiJson):
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

    _json = JsonShape(
        "assistant message",
        tag="role",
        content=_blocks(TextContent, ThinkingContent, ToolCall),
        api=STR,
        provider=STR,
        model=STR,
        response_model=OPT_STR,
        response_id=OPT_STR,
        diagnostics=items(lambda x: dict(json_object(x, "diagnostic")), dict).or_none(),
        usage=nested(Usage),
        stop_reason=literal(StopReason),
        error_message=OPT_STR,
        timestamp=INT,
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        if self.diagnostics is not None:
            object.__setattr__(self, "diagnostics", tuple(self.diagnostics))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultMessage(PiJson):
    """The host's answer to a `ToolCall`; `details` is any JSON the tool wants to keep aside."""

    role: ClassVar[Literal["toolResult"]] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: Sequence[UserContent]
    is_error: bool = False
    details: Any = None
    timestamp: int

    _json = JsonShape(
        "tool result message",
        dict.fromkeys(("tool_call_id", "tool_name"), STR),
        tag="role",
        content=_USER_BLOCKS,
        details=KEPT,
        is_error=BOOL,
        timestamp=INT,
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage

_MESSAGE_ROLES: dict[str, Callable[[Mapping[str, Any]], Message]] = {
    message.role: message.from_json for message in (UserMessage, AssistantMessage, ToolResultMessage)
}


def message_from_json(data: Mapping[str, Any]) -> Message:
    """Decode any message by its `role`. Raises `DecodeError` for an unknown role."""
    return by_tag(data, "message", "role", _MESSAGE_ROLES)


# --- tools, context, models --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tool(PiJson):
    """A tool the host offers: `parameters` is its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    _json = JsonShape("tool", name=STR, description=STR, parameters=DICT)


@dataclass(frozen=True, slots=True)
class Context(PiJson):
    """Everything a turn sees: the system prompt, the conversation so far and the host's tools."""

    system_prompt: str | None = None
    messages: Sequence[Message] = ()
    tools: Sequence[Tool] | None = None

    _json = JsonShape(
        "context",
        system_prompt=OPT_STR,
        messages=items(message_from_json),
        tools=items(Tool.from_json).or_none(),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))


@dataclass(frozen=True, slots=True)
class ModelCost(_Split[float]):
    """A model's prices in dollars per million tokens (pi's `Model.cost`, which has no total)."""

    _json = JsonShape("model cost", _split(NUM))


def _input_kinds(d: Mapping[str, Any], key: str, what: str) -> list[InputKind]:
    kinds = list_field(d, key, what)
    for kind in kinds:
        if kind not in get_args(InputKind):
            raise DecodeError(f"{what}: unknown input kind {kind!r}")
    return kinds


@dataclass(frozen=True, slots=True, kw_only=True)
class Model(PiJson):
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

    _json = JsonShape(
        "model",
        dict.fromkeys(("id", "name", "api", "provider", "base_url"), STR),
        reasoning=BOOL,
        thinking_level_map=OPT_DICT,
        input=Kind(_input_kinds, list),
        cost=nested(ModelCost),
        context_window=INT,
        max_tokens=INT,
        headers=OPT_DICT,
        compat=OPT_DICT,
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", tuple(self.input))
