"""Decode one row of agy's `steps` table (protobuf `gemini_coder.Step`) into a normalized Step.

Sans-I/O: takes the row's values, returns a `Step` or raises `DecodeError`. Field numbers: AGY-FORMATS §3.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agy_provider.agy.step import (
    STATUS_BY_NUMBER,
    Interaction,
    InteractionKind,
    PermissionRequest,
    Question,
    QuestionOption,
    Step,
    StepKind,
    StepStatus,
    StepUsage,
    ToolCall,
    ToolResult,
)
from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext
from agy_provider.wire.protowire import Message, iter_fields

__all__ = [
    "INTERACTION_NAMES",
    "LEGACY_TOOL_FIELDS",
    "MAX_REQUESTED_TOOL_CALLS",
    "STOP_REASONS",
    "GeneratorRecord",
    "answers_text",
    "decode_generator_record",
    "decode_metadata_usage",
    "decode_step_payload",
    "decode_step_row",
    "decode_usage_stats",
    "error_details_text",
    "model_of_turn",
    "parse_arguments",
]

# Step payload fields (the `oneof step` of gemini_coder.Step) that hold one kind of step.
_USER, _PLANNER, _ERROR_MSG, _CHECKPOINT = 19, 20, 24, 30
_HISTORY, _SYSTEM, _EPHEMERAL, _GENERIC = 111, 114, 103, 140
_FINISH = 12
_RUN_COMMAND, _VIEW_FILE, _LIST_DIR, _GREP, _CODE_ACTION, _MCP = 28, 14, 15, 13, 10, 47
_ASK_QUESTION, _INVOKE_SUBAGENT, _AGENCY_TOOL = 154, 143, 116
_METADATA, _STEP_ERROR, _REQUESTED_INTERACTION = 5, 31, 56

# Legacy typed tool payloads -> the tool name agy gives them in tool calls.
LEGACY_TOOL_FIELDS: Mapping[int, str] = {
    _RUN_COMMAND: "run_command",
    _VIEW_FILE: "view_file",
    _LIST_DIR: "list_dir",
    _GREP: "grep_search",
    _CODE_ACTION: "code_action",
    _MCP: "mcp_tool",
    _ASK_QUESTION: "ask_question",
    _INVOKE_SUBAGENT: "invoke_subagent",
    _AGENCY_TOOL: "agency_tool",
}

_TOOL_FIELDS = frozenset({_GENERIC, *LEGACY_TOOL_FIELDS})

# A planner step's requested tool calls (20.7) decoded at most: each call also runs as its own
# tool step, so a Step only needs some of them; the bound keeps a row of megabytes of repeated
# calls from costing memory in proportion to it.
MAX_REQUESTED_TOOL_CALLS = 64

# exa.codeium_common_pb.StopReason, the values a planner step carries.
STOP_REASONS: Mapping[int, str] = {
    0: "",
    1: "incomplete",
    2: "stop_pattern",
    3: "max_tokens",
    10: "function_call",
    11: "content_filter",
    13: "error",
    16: "client_canceled",
}

_ANY_STEP_URL = "type.googleapis.com/gemini_coder.Step"
# What Google's runtime (localharness) wraps a host-side tool's call and answer in (AGY-FORMATS §6).
_ANY_TOOL_RESPONSE_URL = "type.googleapis.com/antigravity.localharness.ToolResponse"
_ANY_TOOL_CALL_URL = "type.googleapis.com/antigravity.localharness.ToolCall"

# exa.diff_action_pb.UnifiedDiffLine.type -> the prefix a unified diff gives that line.
_DIFF_PREFIX: Mapping[int, str] = {1: "+", 2: "-", 3: " "}

# A provider error as Google's Go runtime words it in a short error (AGY-FORMATS §6), e.g.
# "agent executor error: model unreachable: Error 429, Message: …, Status: RESOURCE_EXHAUSTED,
# Details: []: Error 429, …". The cause is the first "Error N, Message: …, Status: …" in it.
_PROVIDER_ERROR = re.compile(r"Error (\d{3}), Message: (.*?), Status: ([A-Z_]+)", re.DOTALL)
# The cause sits at the start of a short error; looking no further keeps a hostile or huge error
# string from costing more than this.
_ERROR_SCAN_CHARS = 4096

# exa.cortex_pb.RequestedInteraction fields by number, named as agy's JSON names them.
INTERACTION_NAMES: Mapping[int, str] = {
    2: "deploy",
    3: "runCommand",
    4: "openBrowserUrl",
    5: "runExtensionCode",
    7: "executeBrowserJavascript",
    8: "captureBrowserScreenshot",
    9: "clickBrowserPixel",
    13: "browserAction",
    14: "openBrowserSetup",
    15: "confirmBrowserSetup",
    16: "sendCommandInput",
    17: "readUrlContent",
    18: "mcp",
    19: "filePermission",
    20: "elicitation",
    21: "permission",
    22: "askQuestion",
    23: "approvalInteraction",
}


def decode_step_row(
    index: int,
    step_type: int,
    status: int,
    payload: bytes | None,
    *,
    metadata: bytes | None = None,
    error_details: bytes | None = None,
) -> Step:
    """Decode a `steps` row. The payload decides; the `step_type`/`status` columns fill gaps.

    Raises `DecodeError` when the payload (or a blob it needs) does not decode.
    """
    if not payload:
        # A row with no payload yet: trust the columns, it is a placeholder.
        return Step(
            index=index,
            kind=_kind_from_type(step_type),
            status=STATUS_BY_NUMBER.get(status, StepStatus.UNSPECIFIED),
            step_type=step_type,
        )
    msg = Message(payload)
    meta = msg.message(_METADATA)
    if meta is None and metadata:
        meta = Message(metadata)
    step = decode_step_payload(msg, index=index, meta=meta)
    if not step.error and error_details:
        step = _with_error(step, _error_text(Message(error_details)))
    return step


def decode_step_payload(
    msg: Message, *, index: int | None = None, meta: Message | None = None
) -> Step:
    """Decode a `gemini_coder.Step` message (a row payload, or a legacy step inside an Any)."""
    if meta is None:
        meta = msg.message(_METADATA)
    step_type = msg.uint(1)
    status = STATUS_BY_NUMBER.get(msg.uint(4), StepStatus.UNSPECIFIED)
    present = msg.numbers()
    conversation_id = trajectory_id = ""
    meta_index: int | None = None
    tool: ToolCall | None = None
    usage: StepUsage | None = None
    execution_id = ""
    created_at_ms = 0
    if meta is not None:
        info = meta.message(20)
        if info is not None:
            trajectory_id = info.string(1)
            meta_index = info.uint(2)
            conversation_id = info.string(4)
        tool = _tool_call(meta.message(4))
        usage = decode_metadata_usage(meta)
        execution_id = meta.string(12)
        if step_type == 14:  # only a turn's user step dates the turn; skip the walk elsewhere
            created = meta.message(1)
            if created is not None:
                created_at_ms = created.uint(1) * 1000 + created.uint(2) // 1_000_000
    if index is None:
        index = meta_index or 0

    error = ""
    err = msg.message(_STEP_ERROR)
    if err is not None:
        error = _error_text(err)
    fields: dict[str, Any] = {
        "index": index,
        "status": status,
        "step_type": step_type,
        "conversation_id": conversation_id,
        "trajectory_id": trajectory_id,
        "execution_id": execution_id,
        "created_at_ms": created_at_ms,
        "usage": usage,
        "error": error,
        "interaction": _interaction(msg.message(_REQUESTED_INTERACTION))
        if status is StepStatus.WAITING
        else None,
    }

    if _USER in present or step_type == 14:
        return Step(kind=StepKind.USER, text=_user_text(msg.message(_USER)), **fields)
    if _HISTORY in present or step_type == 98:
        return Step(kind=StepKind.HISTORY, **fields)
    if _ERROR_MSG in present or step_type == 17:
        body = msg.message(_ERROR_MSG)
        detail = body.message(3) if body is not None else None
        if tool is not None:
            # A tool call refused before it ran (Google's runtime: a policy denial, type 17
            # status 7 `is_benign`, AGY-FORMATS §6): one of the turn's tool runs, and the turn
            # goes on — never the turn's failure. The short error says who refused it.
            reason = (_refusal_text(detail) if detail is not None else "") or error
            fields["error"] = reason
            fields["tool"] = tool
            fields["result"] = ToolResult(output="", is_error=True) if status.terminal else None
            return Step(kind=StepKind.TOOL, **fields)
        fields["error"] = (_error_text(detail) if detail is not None else "") or error
        return Step(kind=StepKind.ERROR, **fields)
    if _CHECKPOINT in present or step_type == 23:
        title = msg.path_string(_CHECKPOINT, 4).split("\n", 1)[0].strip()
        return Step(kind=StepKind.CHECKPOINT, title=title, **fields)
    if _SYSTEM in present or _EPHEMERAL in present or step_type in (101, 90):
        text = msg.path_string(_SYSTEM, 1) or msg.path_string(_EPHEMERAL, 1)
        return Step(kind=StepKind.SYSTEM, text=text, **fields)
    if (_FINISH in present or step_type == 2) and tool is None:
        # FINISH (type 2, field 12): the end of the agent's loop (1.3.x, AGY-FORMATS §2.3;
        # unverified in a database): bookkeeping, never the answer nor the turn's failure.
        return Step(kind=StepKind.SYSTEM, **fields)

    planner = msg.message(_PLANNER)
    if planner is None and step_type == 15 and usage is not None and not present & _TOOL_FIELDS:
        # A placeholder has no model call yet; a finished model call always writes its response
        # (20.6 message id at least). Usage without field 20 means the payload was cut short.
        raise DecodeError("planner step has usage but no response (field 20): payload is truncated")
    if planner is not None:
        fields["text"] = planner.string(8) or planner.string(1)
        fields["thinking"] = planner.string(3)
        fields["stop_reason"] = STOP_REASONS.get(planner.uint(12), "other")
        fields["requested_tool_calls"] = _requested_calls(planner)

    legacy = _legacy_tool_field(present)
    if tool is not None or _GENERIC in present or legacy is not None:
        if legacy == _MCP:
            # The MCP body names the server and the server's own tool name; metadata only has
            # the model-facing alias (`mcp_<server>_<tool>`).
            tool = _mcp_call(msg.message(_MCP)) or tool
        if tool is None:
            tool = _tool_from_body(msg, legacy)
        fields["tool"] = tool
        fields["result"] = _tool_result(msg, legacy, status, error)
        return Step(kind=StepKind.TOOL, **fields)
    if planner is not None or step_type == 15:
        return Step(kind=StepKind.ASSISTANT, **fields)
    return Step(kind=StepKind.UNKNOWN, **fields)


def decode_metadata_usage(meta: Message) -> StepUsage | None:
    """Usage of the model call recorded in metadata 5.9, if any."""
    usage = meta.message(9)
    if usage is None:
        return None
    return decode_usage_stats(usage)


def decode_usage_stats(usage: Message) -> StepUsage:
    """An `exa.codeium_common_pb.ModelUsageStats` (2 input, 3 output, 4 cache write, 5 cache read)."""
    return StepUsage(
        input=usage.uint(2),
        output=usage.uint(3),
        cache_read=usage.uint(5),
        cache_write=usage.uint(4),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GeneratorRecord:
    """One model call's record in `gen_metadata` (AGY-FORMATS §3.6).

    `slug` is the model that answered (1.19), `name` the model as configured or displayed
    (1.21); `step_indices` (field 2) are the steps this call wrote — the reliable link to the
    turn, since Google's runtime writes one execution id (4) for every turn of a conversation.
    """

    step_indices: tuple[int, ...]
    execution_id: str
    slug: str
    name: str

    @property
    def model(self) -> str:
        """The model to report: the slug, else the configured name ("" when neither is set)."""
        return self.slug or self.name


def decode_generator_record(data: bytes) -> GeneratorRecord:
    """Decode a `gen_metadata.data` blob. Raises `DecodeError` when it is not a protobuf message."""
    record = Message(data)
    chat = record.message(1)
    return GeneratorRecord(
        step_indices=tuple(record.packed_uints(2)),
        execution_id=record.string(4),
        slug=chat.string(19) if chat is not None else "",
        name=chat.string(21) if chat is not None else "",
    )


def model_of_turn(records: Iterable[GeneratorRecord], after: int, before: int | None = None) -> str:
    """The model that answered a turn: the newest record that wrote a step in `(after, before)`.

    `after` is the turn's USER step index; `before` the next turn's (None: to the end). Records
    that name no steps (field 2) or no model are passed over; "" when no record fits.
    """
    model = ""
    for record in records:
        if record.model and any(
            after < i and (before is None or i < before) for i in record.step_indices
        ):
            model = record.model
    return model


def _kind_from_type(step_type: int) -> StepKind:
    return {
        2: StepKind.SYSTEM,  # FINISH (1.3.x)
        14: StepKind.USER,
        15: StepKind.ASSISTANT,
        17: StepKind.ERROR,
        23: StepKind.CHECKPOINT,
        98: StepKind.HISTORY,
        101: StepKind.SYSTEM,
        90: StepKind.SYSTEM,
    }.get(
        step_type,
        StepKind.TOOL
        if step_type in (132, 21, 8, 9, 7, 5, 38, 103, 127, 138)
        else StepKind.UNKNOWN,
    )


def _legacy_tool_field(present: set[int]) -> int | None:
    for number in LEGACY_TOOL_FIELDS:
        if number in present:
            return number
    return None


def _user_text(body: Message | None) -> str:
    if body is None:
        return ""
    text = body.string(2)
    if text:
        return text
    items = [item.string(1) for item in body.messages(3)]
    return "".join(items) or body.string(1)


def _tool_call(call: Message | None) -> ToolCall | None:
    if call is None:
        return None
    name = call.string(2) or call.string(9)
    if not name:
        return None
    return ToolCall(id=call.string(1), name=name, arguments=parse_arguments(call.string(3)))


def parse_arguments(text: str) -> Mapping[str, Any]:
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


def _tool_from_body(msg: Message, legacy: int | None) -> ToolCall:
    generic = msg.message(_GENERIC)
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


def _requested_calls(planner: Message) -> tuple[ToolCall, ...]:
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
        call = _tool_call(Message(value, base_offset=field.offset, depth=planner.depth + 1))
        if call is not None:
            calls.append(call)
            if len(calls) == MAX_REQUESTED_TOOL_CALLS:
                break
    return tuple(calls)


def _mcp_call(body: Message | None) -> ToolCall | None:
    """An MCP tool step's call (47: 1 server name, 2 the call {1 id, 2 name, 3 arguments})."""
    if body is None:
        return None
    call = _tool_call(body.message(2))
    if call is None:
        return None
    server = body.string(1)
    name = f"{server}/{call.name}" if server else call.name
    return ToolCall(id=call.id, name=name, arguments=call.arguments)


def _generic_name(generic: Message) -> str:
    payload = _embedded_step(generic)
    if payload is not None:
        meta = payload.message(_METADATA)
        call = _tool_call(meta.message(4)) if meta is not None else None
        if call is not None:
            return call.name
        legacy = _legacy_tool_field(payload.numbers())
        if legacy is not None:
            return LEGACY_TOOL_FIELDS[legacy]
    return "tool"


def _embedded_step(generic: Message) -> Message | None:
    """The legacy typed step a generic tool run carries at 140.2.6 (an Any), if any."""
    any_msg = generic.path(2, 6)
    if any_msg is None or any_msg.string(1) != _ANY_STEP_URL:
        return None
    return any_msg.message(2)


def _tool_result(
    msg: Message, legacy: int | None, status: StepStatus, error: str
) -> ToolResult | None:
    is_error = status is StepStatus.ERROR
    generic = msg.message(_GENERIC)
    body: Message | None = None
    kind = legacy
    text = ""
    if generic is not None:
        text = generic.path_string(2, 1)
        inner = _embedded_step(generic)
        if inner is not None:
            kind = _legacy_tool_field(inner.numbers())
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
        elif kind in (_GREP, _MCP) and not text:
            text = body.string(3)
            if kind == _MCP and body.bool(7):
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


def error_details_text(details: Message) -> str:
    """The line a person should see for a CortexErrorDetails (24.3 or field 31).

    A provider error is named by the short error's cause (`Error 429, Message: …, Status:
    RESOURCE_EXHAUSTED`): Google's runtime pairs it with a generic user message. Otherwise the
    user message, else the short error, else the model-facing one. The full error carries a Go
    stack trace: only its first line is ever used.
    """
    short = details.string(2)[:_ERROR_SCAN_CHARS]
    full_head = _first_line(details.string(3)[:_ERROR_SCAN_CHARS])
    found = _PROVIDER_ERROR.search(short) or _PROVIDER_ERROR.search(full_head)
    if found is not None:
        code, message, status = found.groups()
        return f"Error {code}, Message: {message.strip()}, Status: {status}"
    return details.string(1) or _first_line(short) or details.string(9) or full_head


_error_text = error_details_text


def _refusal_text(details: Message) -> str:
    """Why a tool was refused: the short error names who refused (`denied by pre-tool hook: …`)."""
    return _first_line(details.string(2)) or details.string(1) or details.string(9)


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def _with_error(step: Step, error: str) -> Step:
    return dataclasses.replace(step, error=error)


def _interaction(spec: Message | None) -> Interaction | None:
    if spec is None:
        return None
    permission = spec.message(21)
    if permission is not None:
        resource = permission.message(1)
        return Interaction(
            kind=InteractionKind.PERMISSION,
            permission=PermissionRequest(
                action=resource.string(1) if resource is not None else "",
                target=resource.string(2) if resource is not None else "",
                description=permission.string(5),
            ),
            name="permission",
        )
    ask = spec.message(22)
    if ask is not None:
        questions = tuple(
            Question(
                question=entry.string(1),
                options=tuple(QuestionOption(o.string(1), o.string(2)) for o in entry.messages(2)),
                multi_select=entry.bool(3),
            )
            for entry in ask.messages(1)
        )
        return Interaction(kind=InteractionKind.QUESTION, questions=questions, name="askQuestion")
    numbers = sorted(spec.numbers())
    name = INTERACTION_NAMES.get(numbers[0], f"field {numbers[0]}") if numbers else ""
    return Interaction(kind=InteractionKind.OTHER, name=name)
