"""Decode one row of agy's `steps` table (protobuf `gemini_coder.Step`) into a normalized Step.

Sans-I/O: takes the row's values, returns a `Step` or raises `DecodeError`. Field numbers: AGY-FORMATS §3.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.growing_text import GrowingTexts
from agy_provider.agy.row_tools import GENERIC_FIELD
from agy_provider.agy.row_tools import LEGACY_TOOL_FIELDS
from agy_provider.agy.row_tools import MAX_REQUESTED_TOOL_CALLS
from agy_provider.agy.row_tools import MCP_FIELD
from agy_provider.agy.row_tools import METADATA_FIELD
from agy_provider.agy.row_tools import answers_text
from agy_provider.agy.row_tools import legacy_tool_field
from agy_provider.agy.row_tools import mcp_call
from agy_provider.agy.row_tools import parse_arguments
from agy_provider.agy.row_tools import requested_calls
from agy_provider.agy.row_tools import tool_call
from agy_provider.agy.row_tools import tool_from_body
from agy_provider.agy.row_tools import tool_result
from agy_provider.agy.step import STATUS_BY_NUMBER
from agy_provider.agy.step import Interaction
from agy_provider.agy.step import InteractionKind
from agy_provider.agy.step import PermissionRequest
from agy_provider.agy.step import Question
from agy_provider.agy.step import QuestionOption
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import ToolCall
from agy_provider.agy.step import ToolResult
from agy_provider.errors import DecodeError
from agy_provider.wire.protowire import Message

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
_HISTORY, _SYSTEM, _EPHEMERAL = 111, 114, 103
_FINISH = 12
_STEP_ERROR, _REQUESTED_INTERACTION = 31, 56

_TOOL_FIELDS = frozenset({GENERIC_FIELD, *LEGACY_TOOL_FIELDS})

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
    texts: GrowingTexts | None = None,
) -> Step:
    """Decode a `steps` row. The payload decides; the `step_type`/`status` columns fill gaps.

    `texts`, kept by the caller for this row from one read to the next, makes the answer and
    thinking of a row rewritten with more text cost what grew (see `GrowingTexts`).
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
    meta = msg.message(METADATA_FIELD)
    if meta is None and metadata:
        meta = Message(metadata)
    bound = texts.bind(payload) if texts is not None else None
    step = decode_step_payload(msg, index=index, meta=meta, texts=bound)
    if not step.error and error_details:
        step = _with_error(step, _error_text(Message(error_details)))
    return step


def decode_step_payload(
    msg: Message,
    *,
    index: int | None = None,
    meta: Message | None = None,
    texts: GrowingTexts | None = None,
) -> Step:
    """Decode a `gemini_coder.Step` message (a row payload, or a legacy step inside an Any).

    `texts` must be bound to the buffer `msg` was built from (`decode_step_row` does that).
    """
    if meta is None:
        meta = msg.message(METADATA_FIELD)
    step_type = msg.uint(1)
    status = STATUS_BY_NUMBER.get(msg.uint(4), StepStatus.UNSPECIFIED)
    present = msg.numbers()
    recorded, meta_index, tool = _metadata_fields(meta, step_type)
    if index is None:
        index = meta_index or 0
    err = msg.message(_STEP_ERROR)
    error = _error_text(err) if err is not None else ""
    fields: dict[str, Any] = {
        "index": index,
        "status": status,
        "step_type": step_type,
        **recorded,
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
    usage = fields["usage"]
    if planner is None and step_type == 15 and usage is not None and not present & _TOOL_FIELDS:
        # A placeholder has no model call yet; a finished model call always writes its response
        # (20.6 message id at least). Usage without field 20 means the payload was cut short.
        raise DecodeError("planner step has usage but no response (field 20): payload is truncated")
    if planner is not None:
        fields["text"] = _string(planner, 8, texts) or _string(planner, 1, texts)
        fields["thinking"] = _string(planner, 3, texts)
        fields["stop_reason"] = STOP_REASONS.get(planner.uint(12), "other")
        fields["requested_tool_calls"] = requested_calls(planner)

    legacy = legacy_tool_field(present)
    if tool is not None or GENERIC_FIELD in present or legacy is not None:
        if legacy == MCP_FIELD:
            # The MCP body names the server and the server's own tool name; metadata only has
            # the model-facing alias (`mcp_<server>_<tool>`).
            tool = mcp_call(msg.message(MCP_FIELD)) or tool
        if tool is None:
            tool = tool_from_body(msg, legacy)
        fields["tool"] = tool
        fields["result"] = tool_result(msg, legacy, status, error)
        return Step(kind=StepKind.TOOL, **fields)
    if planner is not None or step_type == 15:
        return Step(kind=StepKind.ASSISTANT, **fields)
    return Step(kind=StepKind.UNKNOWN, **fields)


def _metadata_fields(
    meta: Message | None, step_type: int
) -> tuple[dict[str, Any], int | None, ToolCall | None]:
    """What a step's metadata (field 5) records: the Step fields it fills, its own step index and
    the tool call it names."""
    recorded: dict[str, Any] = {
        "conversation_id": "",
        "trajectory_id": "",
        "execution_id": "",
        "created_at_ms": 0,
        "usage": None,
    }
    if meta is None:
        return recorded, None, None
    meta_index: int | None = None
    info = meta.message(20)
    if info is not None:
        recorded["trajectory_id"] = info.string(1)
        meta_index = info.uint(2)
        recorded["conversation_id"] = info.string(4)
    recorded["usage"] = decode_metadata_usage(meta)
    recorded["execution_id"] = meta.string(12)
    if step_type == 14:  # only a turn's user step dates the turn; skip the walk elsewhere
        created = meta.message(1)
        if created is not None:
            recorded["created_at_ms"] = created.uint(1) * 1000 + created.uint(2) // 1_000_000
    return recorded, meta_index, tool_call(meta.message(4))


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


def _string(planner: Message, number: int, texts: GrowingTexts | None) -> str:
    """A planner string (20.1, 20.3, 20.8): the ones that grow while the model writes."""
    if texts is None:
        return planner.string(number)
    return texts.string(planner, number, (_PLANNER, number))


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


def _user_text(body: Message | None) -> str:
    if body is None:
        return ""
    text = body.string(2)
    if text:
        return text
    items = [item.string(1) for item in body.messages(3)]
    return "".join(items) or body.string(1)


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
