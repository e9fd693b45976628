"""The tool steps of agy's `steps` rows: the call, its arguments and its result, by payload kind.

Owns the generic (140) and legacy typed tool bodies (AGY-FORMATS §3, §6); sans-I/O, used by rows.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import ToolCall
from agy_provider.agy.step import ToolResult
from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext
from agy_provider.wire.protowire import Message
from agy_provider.wire.protowire import iter_fields

__all__ = [
    "GENERIC_FIELD",
    "LEGACY_TOOL_FIELDS",
    "MAX_REQUESTED_TOOL_CALLS",
    "MCP_FIELD",
    "METADATA_FIELD",
    "answers_text",
    "legacy_tool_field",
    "mcp_call",
    "parse_arguments",
    "requested_calls",
    "tool_call",
    "tool_from_body",
    "tool_result",
]

# Step payload fields (gemini_coder.Step): the generic tool run, the legacy typed tool bodies, and
# the step's metadata (where a tool call is named).
GENERIC_FIELD = 140
_RUN_COMMAND, _VIEW_FILE, _LIST_DIR, _GREP, _CODE_ACTION, MCP_FIELD = 28, 14, 15, 13, 10, 47
_ASK_QUESTION, _INVOKE_SUBAGENT, _AGENCY_TOOL = 154, 143, 116
METADATA_FIELD = 5

# Legacy typed tool payloads -> the tool name agy gives them in tool calls.
LEGACY_TOOL_FIELDS: Mapping[int, str] = {
    _RUN_COMMAND: "run_command",
    _VIEW_FILE: "view_file",
    _LIST_DIR: "list_dir",
    _GREP: "grep_search",
    _CODE_ACTION: "code_action",
    MCP_FIELD: "mcp_tool",
    _ASK_QUESTION: "ask_question",
    _INVOKE_SUBAGENT: "invoke_subagent",
    _AGENCY_TOOL: "agency_tool",
}

# A planner step's requested tool calls (20.7) decoded at most: each call also runs as its own
# tool step, so a Step only needs some of them; the bound keeps a row of megabytes of repeated
# calls from costing memory in proportion to it.
MAX_REQUESTED_TOOL_CALLS = 64

_ANY_STEP_URL = "type.googleapis.com/gemini_coder.Step"
# What Google's runtime (localharness) wraps a host-side tool's call and answer in (AGY-FORMATS §6).
_ANY_TOOL_RESPONSE_URL = "type.googleapis.com/antigravity.localharness.ToolResponse"
_ANY_TOOL_CALL_URL = "type.googleapis.com/antigravity.localharness.ToolCall"

# exa.diff_action_pb.UnifiedDiffLine.type -> the prefix a unified diff gives that line.
_DIFF_PREFIX: Mapping[int, str] = {1: "+", 2: "-", 3: " "}


def legacy_tool_field(present: set[int]) -> int | None:
    for number in LEGACY_TOOL_FIELDS:
        if number in present:
            return number
    return None


def tool_call(call: Message | None) -> ToolCall | None:
    if call is None:
        return None
    name = call.string(2) or call.string(9)
    if not name:
        return None
    return ToolCall(id=call.string(1), name=name, arguments=parse_arguments(call.string(3)))


def parse_arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments JSON as an object; anything else becomes `{}` (never raises)."""
    if not text:
        return {}
    try:
        # Strict: NaN/1e400 or a lone surrogate would reach the output, 2,000-deep nesting
        # would raise RecursionError (see wire/jsontext.py).
        value = jsontext.loads(text, "tool arguments")
    except DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_from_body(msg: Message, legacy: int | None) -> ToolCall:
    generic = msg.message(GENERIC_FIELD)
    if generic is not None:
        pairs = {entry.string(1): entry.string(2) for entry in generic.messages(1)}
        return ToolCall(id="", name=_generic_name(generic), arguments=pairs)
    name = LEGACY_TOOL_FIELDS.get(legacy or 0, "tool")
    body = msg.message(legacy) if legacy is not None else None
    args: dict[str, Any] = {}
    if body is not None:
        if legacy == _RUN_COMMAND:
            args = {"CommandLine": body.string(23) or body.string(25), "Cwd": body.string(2)}
        elif legacy == _VIEW_FILE:
            args = {"AbsolutePath": _uri_path(body.string(1))}
        elif legacy == _LIST_DIR:
            args = {"DirectoryPath": _uri_path(body.string(1))}
        elif legacy == _GREP:
            args = {"Query": body.string(1), "SearchPath": _uri_path(body.string(11))}
        elif legacy == _CODE_ACTION:
            args = {"TargetFile": _uri_path(body.path_string(2, 1, 8))}
        elif legacy == _INVOKE_SUBAGENT:
            specs = [
                {"TypeName": spec.string(1), "Role": spec.string(2), "Prompt": spec.string(3)}
                for spec in body.messages(9)
            ]
            args = {"Subagents": specs}
        elif legacy == _AGENCY_TOOL:
            name = body.string(2) or name
            for request in body.messages(3):
                if request.string(1) == _ANY_TOOL_CALL_URL:
                    inner = request.message(2)
                    if inner is not None:
                        args = dict(parse_arguments(inner.string(3)))
                    break
    return ToolCall(id="", name=name, arguments={k: v for k, v in args.items() if v})


def requested_calls(planner: Message) -> tuple[ToolCall, ...]:
    """The first `MAX_REQUESTED_TOOL_CALLS` calls a planner step requested (20.7), read lazily.

    Each call also runs as its own tool step; a Step only needs to know that calls were asked
    for. Walking the fields lazily and stopping at the bound keeps a huge row (megabytes of
    repeated calls) at memory proportional to the bound, not to the row.
    """
    calls: list[ToolCall] = []
    for field in iter_fields(planner.raw, planner.offset):
        value = field.value
        if field.number != 7 or not isinstance(value, memoryview):
            continue  # a LEN field's value is a view; anything else is not a call
        call = tool_call(Message(value, base_offset=field.offset, depth=planner.depth + 1))
        if call is not None:
            calls.append(call)
            if len(calls) == MAX_REQUESTED_TOOL_CALLS:
                break
    return tuple(calls)


def mcp_call(body: Message | None) -> ToolCall | None:
    """An MCP tool step's call (47: 1 server name, 2 the call {1 id, 2 name, 3 arguments})."""
    if body is None:
        return None
    call = tool_call(body.message(2))
    if call is None:
        return None
    server = body.string(1)
    name = f"{server}/{call.name}" if server else call.name
    return ToolCall(id=call.id, name=name, arguments=call.arguments)


def _generic_name(generic: Message) -> str:
    payload = _embedded_step(generic)
    if payload is not None:
        meta = payload.message(METADATA_FIELD)
        call = tool_call(meta.message(4)) if meta is not None else None
        if call is not None:
            return call.name
        legacy = legacy_tool_field(payload.numbers())
        if legacy is not None:
            return LEGACY_TOOL_FIELDS[legacy]
    return "tool"


def _embedded_step(generic: Message) -> Message | None:
    """The legacy typed step a generic tool run carries at 140.2.6 (an Any), if any."""
    any_msg = generic.path(2, 6)
    if any_msg is None or any_msg.string(1) != _ANY_STEP_URL:
        return None
    return any_msg.message(2)


def tool_result(
    msg: Message, legacy: int | None, status: StepStatus, error: str
) -> ToolResult | None:
    is_error = status is StepStatus.ERROR
    generic = msg.message(GENERIC_FIELD)
    body: Message | None = None
    kind = legacy
    text = ""
    if generic is not None:
        text = generic.path_string(2, 1)
        inner = _embedded_step(generic)
        if inner is not None:
            kind = legacy_tool_field(inner.numbers())
            body = inner.message(kind) if kind is not None else None
    elif legacy is not None:
        body = msg.message(legacy)
    exit_code: int | None = None
    if body is not None:
        if kind == _RUN_COMMAND:
            out = body.message(21)
            if out is not None:
                text = out.string(1)
            elif not text:
                text = body.string(4)
            if body.has(6):
                exit_code = body.int(6)
        elif kind == _VIEW_FILE and not text:
            text = body.string(4)
        elif kind == _LIST_DIR and not text:
            text = _directory_text(body)
            is_error = is_error or body.bool(4)
        elif kind in (_GREP, MCP_FIELD) and not text:
            text = body.string(3)
            if kind == MCP_FIELD and body.bool(7):
                text, is_error = text or "the user rejected the call", True
        elif kind == _CODE_ACTION and not text:
            text = _diff_text(body)
        elif kind == _INVOKE_SUBAGENT and not text:
            children = [r.string(1) for r in body.messages(10) if r.string(1)]
            if not children and body.string(5):
                children = [body.string(5)]
            text = "\n".join(f"child conversation {child}" for child in children)
        elif kind == _AGENCY_TOOL and not text:
            text, failed = _agency_response(body)
            is_error = is_error or failed
        elif kind == _ASK_QUESTION and not text:
            text = answers_text(
                (
                    entry.string(1),
                    [(o.string(1), o.string(2)) for o in entry.messages(2)],
                    entry.strings(4),
                    entry.string(5),
                )
                for entry in body.messages(1)
            )
    if not status.terminal and not text and exit_code is None:
        return None
    if is_error and not text:
        text = error
    return ToolResult(output=text, exit_code=exit_code, is_error=is_error or bool(exit_code))


def answers_text(
    questions: Iterable[tuple[str, Sequence[tuple[str, str]], Sequence[str], str]],
) -> str:
    """The chosen option texts; with several questions, `question → choices` per line.

    Each question is (question, options as (id, text), selected ids, write-in answer).
    """
    answered = []
    for question, options, selected, write_in in questions:
        chosen = set(selected)
        picked = [text for option_id, text in options if option_id in chosen]
        if write_in:
            picked.append(write_in)
        answered.append((question, ", ".join(picked)))
    if len(answered) == 1:
        return answered[0][1]
    return "\n".join(f"{q} → {a}" for q, a in answered if a)


def _uri_path(uri: str) -> str:
    return uri.removeprefix("file://")


def _directory_text(body: Message) -> str:
    """A directory listing, one entry a line (`name/` for folders), from 15.3 or the older 15.2."""
    names = body.strings(2)
    if names:
        return "\n".join(names)
    lines = []
    for entry in body.messages(3):
        name = entry.string(1)
        if entry.bool(2):
            lines.append(name + "/")
        elif entry.has(4):
            lines.append(f"{name} ({entry.uint(4)} bytes)")
        else:
            lines.append(name)
    if not lines and body.bool(4):
        return "directory not found"
    return "\n".join(lines)


def _diff_text(body: Message) -> str:
    """An edit's recorded diff (10.2.1.2.3.3[] {1 text, 2 type}) as unified-diff lines."""
    diff = body.path(2, 1, 2, 3)
    if diff is None:
        return ""
    lines = [_DIFF_PREFIX.get(line.uint(2), " ") + line.string(1) for line in diff.messages(3)]
    while lines and lines[-1].strip() in ("", "+", "-"):
        lines.pop()  # the runtime ends a diff with an empty line for the final newline
    return "\n".join(lines)


def _agency_response(body: Message) -> tuple[str, bool]:
    """A host-side tool's answer (116.4: Any of localharness.ToolResponse {2 json, 5 error})."""
    for response in body.messages(4):
        if response.string(1) != _ANY_TOOL_RESPONSE_URL:
            continue
        inner = response.message(2)
        if inner is None:
            continue
        if inner.string(5):
            return inner.string(5), True
        return _unwrap_result(inner.string(2)), False
    return "", False


def _unwrap_result(text: str) -> str:
    """`{"result": 3}` (how the SDK wraps a Python tool's return value) reads as `3`."""
    value = parse_arguments(text)
    if list(value) == ["result"]:
        inner = value["result"]
        return inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
    return text
