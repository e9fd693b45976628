"""The host-tool values (`HostTool`, `HostToolCall`, `HostToolResult`) and the checks and caps on
them: tool names and schemas as MCP accepts them, a handler's answer, a result cut to what MCP carries.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol

import jsonschema  # type: ignore[import-untyped]

from agy_provider.errors import UsageError
from agy_provider.pi.types import Tool
from agy_provider.workers import off_loop

__all__ = [
    "MAX_RESULT_BYTES",
    "HostTool",
    "HostToolCall",
    "HostToolHandler",
    "HostToolResult",
    "RegisterHostTool",
    "as_host_tools",
    "as_result",
    "capped",
    "schema_of",
]

# Logged under the bridge's name, as before these were split out of it (hosts filter by it).
log = logging.getLogger("agy_provider.bridge.mcp_bridge")

# A host tool's result text past this (counted as the JSON string the answer carries, escapes
# included) is cut, with a note saying so. The SDK's MCP client refuses a server-sent event over
# 1 MiB (`DEFAULT_MAX_SSE_EVENT_SIZE`) and the call then never completes: agy-sim's client fails
# it, and the host is never told. Real agy's own limit is unverified; 64 KiB is left for the
# JSON-RPC envelope around the text.
MAX_RESULT_BYTES = 1024 * 1024 - 64 * 1024
# MCP tool names (SEP-986, the SDK's own rule).
_TOOL_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclasses.dataclass(frozen=True, slots=True)
class HostTool:
    """A tool the host runs and agy may call: its name, description and arguments' JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_tool(cls, tool: Tool) -> HostTool:
        """A pi `Tool` (context.tools) as a host tool."""
        return cls(tool.name, tool.description, tool.parameters)


@dataclasses.dataclass(frozen=True, slots=True)
class HostToolCall:
    """One call agy made: a bridge-chosen id (unique per bridge), the tool's name, its arguments."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class HostToolResult:
    """What a host tool answered: text for the model, whether it is an error, and the images
    it returned (`(mime type, base64 data)` each: MCP carries them as image content)."""

    text: str
    is_error: bool = False
    images: tuple[tuple[str, str], ...] = ()


HostToolHandler = Callable[[HostToolCall], Awaitable["HostToolResult | str"]]


class RegisterHostTool(Protocol):
    """`register(name, description, parameters)`: parameters as a JSON Schema object."""

    def __call__(
        self, name: str, description: str = "", parameters: Mapping[str, Any] | None = None
    ) -> None: ...


def schema_of(tool: HostTool) -> dict[str, Any]:
    """The tool's input schema as MCP wants it: a JSON Schema whose root is an object."""
    schema = dict(tool.parameters)
    if not schema:
        return {"type": "object", "properties": {}}
    if "type" not in schema:
        schema["type"] = "object"
    if schema["type"] != "object":
        raise UsageError(
            f"host tool {tool.name!r}: its parameters must be a JSON Schema of type 'object' "
            f"(MCP passes arguments as an object), not {schema['type']!r}"
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(
            f"host tool {tool.name!r}: its parameters are not a valid JSON Schema: {exc.message}"
        ) from exc
    return schema


def as_host_tools(tools: Sequence[HostTool | Tool]) -> dict[str, HostTool]:
    found: dict[str, HostTool] = {}
    for tool in tools:
        host_tool = tool if isinstance(tool, HostTool) else HostTool.from_tool(tool)
        if not _TOOL_NAME.fullmatch(host_tool.name):
            raise UsageError(
                f"host tool name {host_tool.name!r} is not a valid MCP tool name: use 1-128 "
                "letters, digits, '_', '-' or '.'"
            )
        if host_tool.name in found:
            raise UsageError(f"host tool {host_tool.name!r} is offered twice")
        found[host_tool.name] = host_tool
    return found


def as_result(value: object, name: str) -> HostToolResult:
    if isinstance(value, HostToolResult):
        return value
    if isinstance(value, str):
        return HostToolResult(value)
    raise TypeError(
        f"the handler of host tool {name!r} returned {type(value).__name__}; "
        "return a str or a HostToolResult"
    )


def _json_size(text: str) -> int:
    """Bytes `text` takes as a JSON string in an MCP message (UTF-8, escapes, quotes)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _cut_note(cut: int, total: int) -> str:
    return (
        f"\n\n[agy-provider: this tool result was cut: {cut:,} of its {total:,} characters are "
        f"left out, as an MCP message carries at most {MAX_RESULT_BYTES:,} bytes of it]"
    )


def _capped_text(text: str, limit: int) -> str | None:
    """`text` cut (the note appended) so that the JSON string is at most `limit` bytes, or None
    when it fits already. The longest prefix that fits is found by bisection; every character
    takes at least one byte, so no prefix longer than `limit` characters is tried."""
    if _json_size(text) <= limit:
        return None
    low, high = 0, min(len(text), limit)
    while low < high:
        middle = (low + high + 1) // 2
        if _json_size(text[:middle] + _cut_note(len(text) - middle, len(text))) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low] + _cut_note(len(text) - low, len(text))


async def capped(
    result: HostToolResult, name: str, limit: int = MAX_RESULT_BYTES
) -> HostToolResult:
    """`result` with its text cut to what an MCP message can carry (logged when cut)."""
    # JSON takes at most 6 bytes per character (\u001f): shorter texts fit without measuring.
    if len(result.text) * 6 + 2 <= limit:
        return result
    cut = await off_loop(_capped_text, result.text, limit)
    if cut is None:
        return result
    log.warning(
        "host tool %s answered %d characters, more than an MCP message carries; cut to %d",
        name,
        len(result.text),
        len(cut),
    )
    return HostToolResult(cut, result.is_error, result.images)
