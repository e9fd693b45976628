"""agy's stream-json values → our types: counts, text, usage, tool parameters, subagents, denials.

Pure and total: every function takes whatever JSON gave and returns a value, never raising.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any
from typing import Final

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import ToolCall
from agy_provider.agy.step import ToolResult

__all__ = [
    "REPLACEMENT",
    "clean",
    "count",
    "denied_actions",
    "describe_denial",
    "error_message",
    "heals",
    "is_denial",
    "plain",
    "stream_json_usage",
    "subagent",
    "subtract_usage",
    "text",
    "tool_update",
]

# Nested tool parameters deeper than this are summarised: agy's are at most 3 deep, and a hostile
# capture must not recurse us into a RecursionError.
_MAX_PARAM_DEPTH: Final = 24
_DENIAL_WORDS = ("denied", "permission check failed", "not permitted")
REPLACEMENT: Final = "\ufffd"


# -- small, total conversions (nothing here raises on odd JSON) ------------------------------


def count(value: Any) -> int:
    """A token or turn count: a non-negative int from whatever JSON gave (odd values → 0)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, min(value, 2**63 - 1))
    if isinstance(value, float) and math.isfinite(value):
        return max(0, min(int(value), 2**63 - 1))
    return 0


def clean(text: str) -> str:
    """`text` without lone surrogates (JSON may carry `\\ud800`; no writer can encode it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def text(value: Any) -> str:
    """A string field; numbers and other scalars become their JSON text, containers ""."""
    if isinstance(value, str):
        return clean(value)
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    try:
        return str(value)
    except ValueError:  # an int too long to print (sys.get_int_max_str_digits)
        return ""


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON value made safe to render: clean strings, finite numbers, bounded depth."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        try:
            return str(value)[:40] + "…"
        except ValueError:  # too many digits to print at all (sys.get_int_max_str_digits)
            return "…"
    if depth >= _MAX_PARAM_DEPTH and isinstance(value, dict | list):
        return "…"
    if isinstance(value, dict):
        return {clean(str(k)): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value]
    return value


def error_message(value: Any) -> str:
    """`error` as agy writes it: `{type, message}`, or a bare string (result, 1.1.17)."""
    if isinstance(value, dict):
        return text(value.get("message")) or text(value.get("type"))
    return text(value)


def stream_json_usage(value: Any) -> StepUsage | None:
    """`{input_tokens, output_tokens, cache_read_tokens, …}` → StepUsage; None when absent.

    `input_tokens` is uncached input, `output_tokens` includes thinking; agy's `total_tokens`
    (input + output) is not read: pi's total is computed from the parts.
    """
    if not isinstance(value, dict):
        return None
    return StepUsage(
        input=count(value.get("input_tokens")),
        output=count(value.get("output_tokens")),
        cache_read=count(value.get("cache_read_tokens")),
        cache_write=count(value.get("cache_write_tokens")),
    )


def subtract_usage(total: StepUsage, previous: StepUsage) -> StepUsage | None:
    """`total - previous` field by field; None when a field would go negative (not a running total)."""
    parts = (
        total.input - previous.input,
        total.output - previous.output,
        total.cache_read - previous.cache_read,
        total.cache_write - previous.cache_write,
    )
    if min(parts) < 0:
        return None
    return StepUsage(*parts)


def is_denial(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _DENIAL_WORDS)


def describe_denial(tool: ToolCall, error: str) -> str:
    target = next(
        (str(v) for k, v in tool.arguments.items() if isinstance(v, str) and v and k != "Cwd"),
        "",
    )
    what = f"{tool.name} {target[:120]}".strip()
    return f"{what} ({error.splitlines()[0][:300]})" if error else what


def denied_actions(value: Any) -> tuple[str, ...]:
    """`denied_actions: [{action, display_name}]` (1.2.x) → readable names."""
    if not isinstance(value, list):
        return ()
    names = []
    for entry in value[:50]:
        if isinstance(entry, Mapping):
            name = text(entry.get("display_name")) or text(entry.get("action"))
        else:
            name = text(entry)
        if name:
            names.append(name[:200])
    return tuple(names)


def subagent(
    body: Mapping[str, Any], status: StepStatus, previous: Step
) -> tuple[ToolCall | None, ToolResult | None]:
    """`subagent_info.subagents[]` → one tool block: role, initial prompt, the child's id."""
    raw_info = body.get("subagent_info")
    info: Mapping[str, Any] = raw_info if isinstance(raw_info, Mapping) else {}
    agents = info.get("subagents")
    entries = [a for a in agents if isinstance(a, Mapping)] if isinstance(agents, list) else []
    if not entries:
        if previous.tool is not None:
            return previous.tool, previous.result if status.terminal else None
        return ToolCall(id="", name="subagent"), ToolResult() if status.terminal else None
    first = entries[0]
    arguments: dict[str, Any] = {}
    for key, field in (
        ("Role", "role"),
        ("TypeName", "type_name"),
        ("InitialPrompt", "initial_prompt"),
        ("ConversationId", "conversation_id"),
    ):
        value = text(first.get(field))
        if value:
            arguments[key] = value
    lines = []
    for entry in entries[:20]:
        role = text(entry.get("role")) or text(entry.get("type_name")) or "subagent"
        child = text(entry.get("conversation_id"))
        prompt = text(entry.get("initial_prompt"))
        lines.append(f"{role}: conversation {child}" if child else role)
        if prompt:
            lines.append(f"prompt: {prompt}")
    tool = ToolCall(id="", name="subagent", arguments=arguments)
    return tool, ToolResult(output="\n".join(lines)) if status.terminal else None


def tool_update(
    body: Mapping[str, Any], agent_type: str, status: StepStatus, previous: Step
) -> tuple[ToolCall | None, ToolResult | None, str]:
    """The tool call, its result once settled, and its failure's message.

    The outcome is in `tool_info.output` / `tool_info.error` (1.1.18+) or at the update's top
    level (1.1.17).
    """
    if agent_type == "subagent":
        return (*subagent(body, status, previous), "")
    if agent_type != "tool":
        return None, None, ""
    raw_info = body.get("tool_info")
    info: Mapping[str, Any] = raw_info if isinstance(raw_info, Mapping) else {}
    name = text(info.get("name")) or text(body.get("tool_name")) or "tool"
    params = info.get("parameters")
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except (ValueError, RecursionError):
            params = {}
    arguments = plain(params) if isinstance(params, dict) else {}
    if not arguments and previous.tool is not None and previous.tool.arguments:
        arguments = previous.tool.arguments  # a later update without parameters keeps them
    tool = ToolCall(id="", name=name, arguments=arguments)
    if not status.terminal:
        return tool, None, ""
    output_value = info.get("output", body.get("output"))
    output = text(output_value) if not isinstance(output_value, dict | list) else ""
    if isinstance(output_value, dict | list):
        output = json.dumps(plain(output_value), ensure_ascii=False)
    message = error_message(info.get("error")) or error_message(body.get("error"))
    failed = status is StepStatus.ERROR or bool(message)
    if failed:
        reason = message or "failed"
        shown = f"{reason}\n{output}" if output and output != reason else reason
        return tool, ToolResult(output=shown, is_error=True), reason
    return tool, ToolResult(output=output), ""


def heals(held: str, candidate: str) -> bool:
    """True when `candidate` reads as `held` with each run of U+FFFD replaced by 1–n characters."""
    pieces: list[str] = []
    runs: list[int] = []
    position = 0
    while True:
        at = held.find(REPLACEMENT, position)
        if at < 0:
            pieces.append(held[position:])
            break
        pieces.append(held[position:at])
        end = at
        while end < len(held) and held[end] == REPLACEMENT:
            end += 1
        runs.append(end - at)
        position = end
    if not candidate.startswith(pieces[0]):
        return False
    cursor = len(pieces[0])
    for run, piece in zip(runs, pieces[1:], strict=True):
        for skip in range(1, run + 1):
            if cursor + skip <= len(candidate) and candidate.startswith(piece, cursor + skip):
                if REPLACEMENT in candidate[cursor : cursor + skip]:
                    return False  # the response is broken in the same place: nothing to heal
                cursor += skip + len(piece)
                break
        else:
            return False
    return True
