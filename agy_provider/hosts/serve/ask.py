"""serve's request values and what every wire API's converter shares: the turn a request asks for
(`ServeAsk`), refusals naming the field (`RequestError`), conversation keys, a forced tool choice,
and the fields every API reads the same way.

Pure: JSON in, values out.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from agy_provider.pi.options import ThinkingLevel
from agy_provider.pi.types import AssistantContent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserContent

__all__ = [
    "DATA_URL",
    "RequestError",
    "ServeAsk",
    "forced_choice",
    "forced_tools",
    "plain_assistant",
    "plain_tool_result",
    "read_arguments",
    "read_effort",
    "read_image",
    "read_model",
    "read_str",
    "read_tool",
    "read_tool_list",
    "session_key",
    "user_id_key",
]

# A client's conversation key (`user`, `metadata.user_id`, `x-agy-session`): what can be a
# session id in our store — no spaces, no control characters, bounded.
_SESSION_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+);base64,(.*)", re.DOTALL)


_EFFORTS: dict[str, ThinkingLevel | None] = {
    "none": None,
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
}


_SERVE_API = "agy"


class RequestError(Exception):
    """A request serve refuses: the HTTP `status` and what to fix (`param`: the field)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclasses.dataclass(frozen=True, slots=True)
class ServeAsk:
    """One request as a turn: the model id, pi's context, the settings, and how to answer.

    `forced_tool`: a forced tool choice — the answer (JSON of `json_schema`) is returned as a
    call of that tool, not as text; `forced_any`: one of several tools (`forced_tools`).
    """

    model: str
    context: Context
    stream: bool = False
    reasoning: ThinkingLevel | None = None
    session_key: str = ""
    json_schema: Mapping[str, Any] | None = None
    include_usage: bool = False
    forced_tool: str = ""
    # Which signal gave `session_key` (the field's name, e.g. `metadata.user_id.session_id`):
    # the request log shows it; "" when no key was given.
    key_source: str = ""
    forced_any: bool = False


def session_key(value: object, field: str) -> str:
    """A client's conversation key, checked; "" for none. Raises `RequestError`."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not _SESSION_KEY.fullmatch(value):
        raise RequestError(
            f"{field}: a conversation key is 1-128 letters, digits or ._:@/+=- "
            "(starting with a letter or digit)",
            param=field,
        )
    return value


def user_id_key(value: object, field: str) -> tuple[str, str]:
    """(the conversation key, the field it came from) of a plain user id, or of a JSON one's
    `session_id` (Claude Code's `{"device_id":…,"account_uuid":…,"session_id":…}`; none: no
    key). Raises `RequestError`."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            inner = f"{field}.session_id"
            key = session_key(parsed.get("session_id"), inner)
            return key, inner if key else ""
    key = session_key(value, field)
    return key, field if key else ""


def forced_choice(
    choice: object,
    name: object,
    tools: list[Tool] | None,
    asked: tuple[Mapping[str, Any] | None, str],
) -> tuple[Mapping[str, Any] | None, str, bool]:
    """An OpenAI `tool_choice` (either API; `name`: the function a `{type: function}` choice
    names) with the answer's format `asked` (schema, field) → `forced_tools`' answer, or the
    asked schema when agy chooses (`auto`, `none`, absent). Raises `RequestError`."""
    if choice is None or choice in ("auto", "none"):
        return asked[0], "", False
    if choice == "required" and not tools:
        raise RequestError("tool_choice: `required` needs tools", param="tool_choice")
    named = isinstance(choice, Mapping) and choice.get("type") == "function"
    if choice != "required" and not (named and isinstance(name, str) and name):
        raise RequestError(
            "tool_choice: auto, none, required, or a function by name", param="tool_choice"
        )
    if asked[0] is not None:
        raise RequestError(
            f"{asked[1]}: cannot be combined with a forced tool_choice (the tool's parameters "
            "shape the answer)",
            param=asked[1],
        )
    return forced_tools(tools or [], name if named and isinstance(name, str) else None)


def forced_tools(tools: list[Tool], name: str | None) -> tuple[Mapping[str, Any], str, bool]:
    """A forced tool call as structured output: (the answer's JSON Schema, the tool's name,
    whether the answer names one of several tools). A named tool (or the only one): its
    parameters. Several: `anyOf` one `{"name": <const>, "arguments": <its parameters>}` per
    tool — the name discriminates, so one branch holds and the answer says which tool it calls.
    """
    if name is None and len(tools) == 1:
        name = tools[0].name
    if name is None:
        return {"type": "object", "anyOf": [_named_call(t) for t in tools]}, "", True
    for tool in tools:
        if tool.name == name:
            return tool.parameters, tool.name, False
    raise RequestError(f"tool_choice: no tool named {name!r}", param="tool_choice")


def _named_call(tool: Tool) -> dict[str, Any]:
    named = {"name": {"const": tool.name}, "arguments": tool.parameters}
    return {
        "type": "object",
        "properties": named,
        "required": [*named],
        "additionalProperties": False,
    }


def read_model(value: object) -> str:
    """The model a request names (`agy/` in front dropped). Raises `RequestError`."""
    if not isinstance(value, str) or not value:
        raise RequestError("model: required (`default` runs agy's configured model)", param="model")
    # Clients that prefix a provider (`agy/gemini-3.7-flash`) mean the same model.
    return value.removeprefix("agy/")


def read_effort(value: object, field: str) -> ThinkingLevel | None:
    """An OpenAI-style effort name as agy's thinking level (None: agy's own). Raises
    `RequestError`."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in _EFFORTS:
        raise RequestError(f"{field}: one of {', '.join(_EFFORTS)}", param=field)
    return _EFFORTS[value]


def read_tool_list(value: object, one: Callable[[int, Any], Tool]) -> list[Tool] | None:
    """Either API's `tools`: None, or a list whose items `one` reads (None when empty)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise RequestError("tools: expected a list", param="tools")
    return [one(i, tool) for i, tool in enumerate(value)] or None


def read_str(value: object, field: str) -> str:
    """`value` when it is a string. Raises `RequestError` naming `field`."""
    if not isinstance(value, str):
        raise RequestError(f"{field}: expected a string", param=field)
    return value


def read_arguments(value: object, field: str) -> dict[str, Any]:
    """A tool call's arguments, an object or its JSON text. Raises `RequestError`."""
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json.loads(value) if isinstance(value, str) and value else {}
    except ValueError as exc:
        raise RequestError(f"{field}.function.arguments: not JSON ({exc})", param=field) from exc
    if not isinstance(parsed, dict):
        raise RequestError(f"{field}.function.arguments: not a JSON object", param=field)
    return parsed


def read_image(data: object, mime_type: str, where: str) -> ImageContent:
    """An image from its base64 data (checked to decode). Raises `RequestError`."""
    if not isinstance(data, str):
        raise RequestError(f"{where}: image data must be base64 text", param=where)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"{where}: image data is not base64 ({exc})", param=where) from exc
    return ImageContent(data=data, mime_type=mime_type)


def read_tool(name: object, description: object, parameters: object) -> Tool:
    """A client's tool (no parameters: an empty object schema). Raises `RequestError`."""
    if not isinstance(name, str) or not name:
        raise RequestError("tools: every tool needs a name", param="tools")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise RequestError(f"tools: {name}'s parameters must be a JSON Schema object")
    return Tool(name, description if isinstance(description, str) else "", dict(parameters))


def plain_assistant(content: list[AssistantContent]) -> AssistantMessage:
    """A client's copy of an earlier answer: plain history (no mark) unless `DeliveredMessages`
    knows it."""
    return AssistantMessage(
        content=content,
        api=_SERVE_API,
        provider=_SERVE_API,
        model="",
        stop_reason="toolUse" if any(isinstance(c, ToolCall) for c in content) else "stop",
        timestamp=0,
    )


def plain_tool_result(
    call_id: str, name: str, content: list[UserContent], *, is_error: bool
) -> ToolResultMessage:
    """A client's tool result as pi's message."""
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name=name,
        content=content,
        is_error=is_error,
        timestamp=0,
    )
