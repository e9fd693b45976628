"""The AskAntigravity pi tool: its definition for a host to register, and running a call of it.

`ask_tool()` is the pi `Tool` (JSON Schema parameters); `run_ask_tool` checks a call's arguments
and runs it through `ask_antigravity`, answering with a pi `ToolResultMessage`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agy_provider.errors import AgyError
from agy_provider.errors import UsageError
from agy_provider.hosts.ask import ASK_TOOL_NAME
from agy_provider.hosts.ask import MODES
from agy_provider.hosts.ask import THINKING_LEVELS
from agy_provider.hosts.ask import ProgressCallback
from agy_provider.hosts.ask import ask_antigravity
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage

__all__ = ["ASK_TOOL_DESCRIPTION", "ASK_TOOL_PARAMETERS", "ask_tool", "run_ask_tool"]

ASK_TOOL_DESCRIPTION = (
    "Delegate one task to Google's Antigravity agent (agy), which works in a folder with its own "
    "tools (it reads files, runs commands and, in accept-edits mode, edits files) and returns its "
    "answer. Give the whole task in `prompt`. The result ends with the conversation id: pass it "
    "as `conversation` to ask a follow-up in the same agy conversation."
)
ASK_TOOL_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "The task or question for agy."},
        "cwd": {"type": "string", "description": "The folder agy works in (default: the host's)."},
        "model": {
            "type": "string",
            "description": "flash, pro, sonnet, opus, or a model slug from `agy models` "
            "(default: the configured model).",
        },
        "thinking": {
            "type": "string",
            "enum": list(THINKING_LEVELS),
            "description": "How hard the model thinks, for models with effort levels.",
        },
        "mode": {
            "type": "string",
            "enum": list(MODES),
            "description": "plan: agy plans without changing files; accept-edits: agy edits "
            "files without asking; default: the configured mode.",
        },
        "conversation": {
            "type": "string",
            "description": "An agy conversation id to continue (from an earlier result).",
        },
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Seconds the whole turn may take (default: the configured turn_timeout).",
        },
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


def ask_tool() -> Tool:
    """The `AskAntigravity` tool definition (pi's `Tool`, JSON Schema parameters) to register."""
    return Tool(
        name=ASK_TOOL_NAME, description=ASK_TOOL_DESCRIPTION, parameters=ASK_TOOL_PARAMETERS
    )


def _tool_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments checked against `ASK_TOOL_PARAMETERS`; `UsageError` names the field."""
    if not isinstance(arguments, Mapping):
        raise UsageError(
            f"{ASK_TOOL_NAME} arguments must be an object, not {type(arguments).__name__}"
        )
    properties: Mapping[str, Any] = ASK_TOOL_PARAMETERS["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise UsageError(
            f"{ASK_TOOL_NAME} takes no argument {', '.join(unknown)} "
            f"(it takes {', '.join(properties)})"
        )
    checked: dict[str, Any] = {}
    for name, value in arguments.items():
        if value is None:
            continue
        spec = properties[name]
        if spec["type"] == "string" and not isinstance(value, str):
            raise UsageError(f"{ASK_TOOL_NAME}: {name} must be a string, not {value!r}")
        if spec["type"] == "number" and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
        ):
            raise UsageError(f"{ASK_TOOL_NAME}: {name} must be a number above 0, not {value!r}")
        if "enum" in spec and value not in spec["enum"]:
            raise UsageError(
                f"{ASK_TOOL_NAME}: {name} must be one of {', '.join(spec['enum'])}, not {value!r}"
            )
        checked[name] = value
    if "prompt" not in checked:
        raise UsageError(f"{ASK_TOOL_NAME} needs a prompt")
    return checked


async def run_ask_tool(
    call: ToolCall,
    *,
    cwd: str | None = None,
    on_progress: ProgressCallback | None = None,
    signal: AbortSignal | None = None,
) -> ToolResultMessage:
    """Execute a host model's `AskAntigravity` call: the pi `ToolResultMessage` to give back.

    `cwd` is the folder used when the call names none. Bad arguments, a refusal or a failed
    turn come back as an error result (`is_error`) saying why, never as an exception.
    """
    try:
        arguments = _tool_arguments(call.arguments)
        arguments.setdefault("cwd", cwd)
        result = await ask_antigravity(
            arguments.pop("prompt"), on_progress=on_progress, signal=signal, **arguments
        )
    except AgyError as exc:
        return ToolResultMessage(
            tool_call_id=call.id,
            tool_name=call.name,
            content=[TextContent(text=f"{ASK_TOOL_NAME} could not run: {exc}")],
            is_error=True,
            timestamp=int(time.time() * 1000),
        )
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextContent(text=result.tool_text())],
        is_error=not result.ok,
        details=result.to_json(),
        timestamp=int(time.time() * 1000),
    )
