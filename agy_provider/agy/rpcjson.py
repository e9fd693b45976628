"""Decode agy's RPC step JSON (protobuf JSON of `gemini_coder.Step`) into a normalized Step.

Handles both shapes (AGY-FORMATS §4.5): poll steps with `metadata.toolCall`, and stream steps without.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.row_tools import answers_text
from agy_provider.agy.row_tools import parse_arguments
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
from agy_provider.wire import jsontext

__all__ = ["CheckedTexts", "decode_json_step", "step_type_number"]

# CortexStepType names we rely on -> numbers (the rest map to 0 and are decided by content).
_TYPE_NUMBERS: Mapping[str, int] = {
    "CODE_ACTION": 5,
    "GREP_SEARCH": 7,
    "FINISH": 2,
    "VIEW_FILE": 8,
    "LIST_DIRECTORY": 9,
    "USER_INPUT": 14,
    "PLANNER_RESPONSE": 15,
    "ERROR_MESSAGE": 17,
    "RUN_COMMAND": 21,
    "CHECKPOINT": 23,
    "MCP_TOOL": 38,
    "EPHEMERAL_MESSAGE": 90,
    "CONVERSATION_HISTORY": 98,
    "SYSTEM_MESSAGE": 101,
    "INVOKE_SUBAGENT": 127,
    "GENERIC": 132,
    "ASK_QUESTION": 138,
}

# Typed tool bodies (JSON key) -> the tool name agy gives such calls.
_TOOL_BODIES: Mapping[str, str] = {
    "runCommand": "run_command",
    "viewFile": "view_file",
    "listDirectory": "list_dir",
    "grepSearch": "grep_search",
    "codeAction": "code_action",
    "mcpTool": "mcp_tool",
    "askQuestion": "ask_question",
    "invokeSubagent": "invoke_subagent",
    "generic": "tool",
}

_ANY_STEP_TYPE = "type.googleapis.com/gemini_coder.Step"


def step_type_number(name: str) -> int:
    """`CORTEX_STEP_TYPE_PLANNER_RESPONSE` -> 15; unknown names -> 0."""
    return _TYPE_NUMBERS.get(name.removeprefix("CORTEX_STEP_TYPE_"), 0)


class CheckedTexts:
    """The answer and thinking of one step as this module last returned them, so a text that
    only grew is checked for lone surrogates from where it grew, not from its start.

    agy's stream sends a growing planner step whole in every frame. A text that starts with the
    one returned last time (a `memcmp`) holds that checked text as its prefix, so only the rest
    is looked at; anything else (shorter, rewritten) is checked whole. Filled only by
    `decode_json_step`, so what it holds is always checked text. `checked` counts the
    characters looked at over its life (tests hold the decoder to "cost follows the growth").
    """

    __slots__ = ("_texts", "checked")

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self.checked = 0

    def text(self, key: str, value: Any) -> str:
        """`_str(value)` for the text `key` ("text", "thinking") of this step."""
        before = self._texts.get(key, "")
        text: str
        if isinstance(value, str) and value.isascii():
            text = value  # str knows this without a scan: no surrogate can be in it
        elif before and isinstance(value, str) and value.startswith(before):
            tail = value[len(before) :]
            self.checked += len(tail)
            clean = jsontext.clean_text(tail)
            text = value if clean is tail else before + clean
        else:
            text = _str(value)
            self.checked += len(text)
        self._texts[key] = text
        return text


def decode_json_step(
    raw: Any,
    *,
    index: int | None = None,
    position: int | None = None,
    texts: CheckedTexts | None = None,
) -> Step:
    """Decode one step object. The index comes from `index`, else the step's own
    `metadata.sourceTrajectoryStepInfo.stepIndex` (omitted when 0), else `position`.

    `raw` may come from any JSON parser (httpx's included): whatever its shape or values, this
    returns a Step whose text is valid Unicode and whose numbers fit 64 bits, or raises
    `DecodeError` — never another exception. `texts`, kept by the caller for this step from one
    frame to the next, makes a growing answer cost what grew (see `CheckedTexts`).
    """
    if not isinstance(raw, dict):
        raise DecodeError(f"step is a {type(raw).__name__}, not an object")
    meta = _obj(raw.get("metadata"))
    info = _obj(meta.get("sourceTrajectoryStepInfo"))
    if index is None:
        # protobuf JSON omits stepIndex when it is 0; without the info block, trust the position.
        index = _int(info.get("stepIndex", 0)) if info else (position or 0)
    step_type = step_type_number(_str(raw.get("type", "")))
    status = _status(raw.get("status"))
    tool = _tool_call(_obj(meta.get("toolCall")))
    fields: dict[str, Any] = {
        "index": index,
        "status": status,
        "step_type": step_type,
        "conversation_id": _str(info.get("cascadeId", "")),
        "trajectory_id": _str(info.get("trajectoryId", "")),
        "execution_id": _str(meta.get("executionId", "")),
        "created_at_ms": _rfc3339_ms(meta.get("createdAt")),
        "usage": _usage(meta.get("modelUsage")),
        "error": _error_text(_obj(raw.get("error"))),
        "interaction": _interaction(_obj(raw.get("requestedInteraction")))
        if status is StepStatus.WAITING
        else None,
    }

    if "userInput" in raw or step_type == 14:
        return Step(kind=StepKind.USER, text=_user_text(_obj(raw.get("userInput"))), **fields)
    if "conversationHistory" in raw or step_type == 98:
        return Step(kind=StepKind.HISTORY, **fields)
    if "errorMessage" in raw or step_type == 17:
        detail = _obj(_obj(raw.get("errorMessage")).get("error"))
        fields["error"] = _error_text(detail) or fields["error"]
        return Step(kind=StepKind.ERROR, **fields)
    if "checkpoint" in raw or step_type == 23:
        intent = _str(_obj(raw.get("checkpoint")).get("userIntent", ""))
        return Step(kind=StepKind.CHECKPOINT, title=intent.split("\n", 1)[0].strip(), **fields)
    if "systemMessage" in raw or "ephemeralMessage" in raw or step_type in (101, 90):
        text = _obj(raw.get("systemMessage")).get("message") or _obj(
            raw.get("ephemeralMessage")
        ).get("content", "")
        return Step(kind=StepKind.SYSTEM, text=_str(text), **fields)
    if ("finish" in raw or step_type == 2) and tool is None:
        return Step(kind=StepKind.SYSTEM, **fields)  # the agent loop's end (1.3.x; as rows.py)

    planner = raw.get("plannerResponse")
    if isinstance(planner, dict):
        text = planner.get("modifiedResponse") or planner.get("response") or ""
        thinking = planner.get("thinking", "")
        fields["text"] = texts.text("text", text) if texts is not None else _str(text)
        fields["thinking"] = (
            texts.text("thinking", thinking) if texts is not None else _str(thinking)
        )
        fields["stop_reason"] = _stop_reason(planner.get("stopReason"))
        fields["requested_tool_calls"] = tuple(
            c for c in (_tool_call(_obj(x)) for x in _list(planner.get("toolCalls"))) if c
        )

    body_key = next((key for key in _TOOL_BODIES if key in raw), None)
    if tool is not None or body_key is not None:
        if body_key == "mcpTool":
            # As rows.py: the MCP body names the server and its own tool name; metadata only
            # has the model-facing alias (`mcp_<server>_<tool>`).
            tool = _mcp_call(_obj(raw.get("mcpTool"))) or tool
        tool = _complete_tool(tool, raw, meta, body_key)
        fields["tool"] = tool
        fields["result"] = _tool_result(raw, body_key, status, fields["error"])
        return Step(kind=StepKind.TOOL, **fields)
    if isinstance(planner, dict) or step_type == 15:
        return Step(kind=StepKind.ASSISTANT, **fields)
    return Step(kind=StepKind.UNKNOWN, **fields)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return jsontext.integer(value)


def _str(value: Any) -> str:
    """A text field as valid Unicode; numbers as their digits; a container is not text."""
    if isinstance(value, str):
        return jsontext.clean_text(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(jsontext.integer(value))  # bounded: str() of a huge int raises
    if isinstance(value, float):
        return repr(value)
    raise DecodeError(f"expected text, found a JSON {type(value).__name__}")


def _rfc3339_ms(value: Any) -> int:
    if not isinstance(value, str) or not value:
        return 0
    # Python's fromisoformat takes at most microseconds; agy writes nanoseconds.
    head, _, frac = value.rstrip("Z").partition(".")
    try:
        stamp = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    except ValueError:
        return 0
    digits = frac[:3]
    # isdigit() alone accepts "²" or "٣", which int() may refuse or misread.
    millis = int((digits + "00")[:3]) if digits.isascii() and digits.isdigit() else 0
    return int(stamp.timestamp()) * 1000 + millis


def _status(value: Any) -> StepStatus:
    name = (value if isinstance(value, str) else "").removeprefix("CORTEX_STEP_STATUS_").lower()
    try:
        return StepStatus(name or "unspecified")
    except ValueError:
        return StepStatus.UNSPECIFIED


def _stop_reason(value: Any) -> str:
    name = (value if isinstance(value, str) else "").removeprefix("STOP_REASON_").lower()
    return "" if name == "unspecified" else name


def _usage(value: Any) -> StepUsage | None:
    if not isinstance(value, dict):
        return None
    return StepUsage(
        input=_int(value.get("inputTokens", 0)),
        output=_int(value.get("outputTokens", 0)),
        cache_read=_int(value.get("cacheReadTokens", 0)),
        cache_write=_int(value.get("cacheWriteTokens", 0)),
    )


def _error_text(details: Mapping[str, Any]) -> str:
    for key in ("userErrorMessage", "shortError", "fullError", "modelErrorMessage"):
        if details.get(key):
            return _str(details[key])
    return ""


def _user_text(body: Mapping[str, Any]) -> str:
    if body.get("userResponse"):
        return _str(body["userResponse"])
    items = "".join(_str(_obj(item).get("text", "")) for item in _list(body.get("items")))
    return items or _str(body.get("query", ""))


def _tool_call(call: Mapping[str, Any]) -> ToolCall | None:
    name = _str(call.get("name") or call.get("originalName") or "")
    if not name:
        return None
    return ToolCall(
        id=_str(call.get("id", "")),
        name=name,
        arguments=parse_arguments(_str(call.get("argumentsJson", ""))),
    )


def _mcp_call(body: Mapping[str, Any]) -> ToolCall | None:
    """An MCP tool step's call (`mcpTool`: serverName, toolCall) named `server/tool`."""
    call = _tool_call(_obj(body.get("toolCall")))
    if call is None:
        return None
    server = _str(body.get("serverName", ""))
    name = f"{server}/{call.name}" if server else call.name
    return ToolCall(id=call.id, name=name, arguments=call.arguments)


def _complete_tool(
    tool: ToolCall | None, raw: Mapping[str, Any], meta: Mapping[str, Any], body_key: str | None
) -> ToolCall:
    """Fill what the stream shape dropped: name from the type, arguments from the body."""
    if tool is not None and tool.arguments:
        return tool
    name = tool.name if tool is not None else _TOOL_BODIES.get(body_key or "", "tool")
    if tool is None and body_key == "generic":
        # The stream drops metadata.toolCall: the embedded legacy step still names the tool.
        payload = _obj(_obj(_obj(raw.get("generic")).get("result")).get("payload"))
        inner = _tool_call(_obj(_obj(payload.get("metadata")).get("toolCall")))
        legacy = next((k for k in _TOOL_BODIES if k in payload and k != "generic"), None)
        name = inner.name if inner is not None else _TOOL_BODIES.get(legacy or "", "tool")
    args: dict[str, Any] = {}
    if body_key == "generic":
        args = jsontext.clean(_obj(_obj(raw.get("generic")).get("args")))
    elif body_key is not None:
        body = _obj(raw.get(body_key))
        for key in (_str(k) for k in _list(meta.get("argumentsOrder"))):
            camel = key[:1].lower() + key[1:]
            for candidate in (camel, camel + "Uri"):
                if candidate in body:
                    value = jsontext.clean(body[candidate])
                    args[key] = value.removeprefix("file://") if isinstance(value, str) else value
                    break
    return ToolCall(id=tool.id if tool is not None else "", name=name, arguments=args)


def _tool_result(
    raw: Mapping[str, Any], body_key: str | None, status: StepStatus, error: str
) -> ToolResult | None:
    text = ""
    exit_code: int | None = None
    key, body = body_key, _obj(raw.get(body_key or ""))
    if key == "generic":
        result = _obj(body.get("result"))
        text = _str(result.get("result", ""))
        payload = _obj(result.get("payload"))
        if payload.get("@type") == _ANY_STEP_TYPE:
            key = next((k for k in _TOOL_BODIES if k in payload and k != "generic"), None)
            body = _obj(payload.get(key or ""))
    if key == "runCommand":
        output = _obj(body.get("combinedOutput")).get("full")
        if output is not None:
            text = _str(output)
        if "exitCode" in body:
            exit_code = _int(body["exitCode"])
        elif status is StepStatus.DONE and output is not None:
            exit_code = 0  # protobuf JSON omits a zero exit code
    elif key == "viewFile" and not text:
        text = _str(body.get("content", ""))
    elif key == "listDirectory" and not text:
        text = "\n".join(_str(_obj(r).get("name", "")) for r in _list(body.get("results")))
    elif key == "mcpTool" and not text:
        text = _str(body.get("resultString", ""))
    elif key == "askQuestion" and not text:
        text = _answers(body)
    is_error = status is StepStatus.ERROR
    if not status.terminal and not text and exit_code is None:
        return None
    if is_error and not text:
        text = error
    return ToolResult(output=text, exit_code=exit_code, is_error=is_error or bool(exit_code))


def _answers(body: Mapping[str, Any]) -> str:
    return answers_text(
        (
            _str(entry.get("question", "")),
            [
                (_str(_obj(o).get("id", "")), _str(_obj(o).get("text", "")))
                for o in _list(entry.get("options"))
            ],
            [_str(i) for i in _list(entry.get("selectedOptionIds"))],
            _str(entry.get("writeInResponse", "")),
        )
        for entry in (_obj(q) for q in _list(body.get("questions")))
    )


def _interaction(spec: Mapping[str, Any]) -> Interaction | None:
    if not spec:
        return None
    if "permission" in spec:
        permission = _obj(spec["permission"])
        resource = _obj(permission.get("resource"))
        return Interaction(
            kind=InteractionKind.PERMISSION,
            permission=PermissionRequest(
                action=_str(resource.get("action", "")),
                target=_str(resource.get("target", "")),
                description=_str(permission.get("actionDescription", "")),
            ),
            name="permission",
        )
    if "askQuestion" in spec:
        questions = tuple(
            Question(
                question=_str(entry.get("question", "")),
                options=tuple(
                    QuestionOption(_str(_obj(o).get("id", "")), _str(_obj(o).get("text", "")))
                    for o in _list(entry.get("options"))
                ),
                multi_select=bool(entry.get("isMultiSelect", False)),
            )
            for entry in (_obj(q) for q in _list(_obj(spec["askQuestion"]).get("questions")))
        )
        return Interaction(kind=InteractionKind.QUESTION, questions=questions, name="askQuestion")
    return Interaction(kind=InteractionKind.OTHER, name=_str(next(iter(spec))))
