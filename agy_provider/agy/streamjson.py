"""Decode agy's `--output-format stream-json` events (AGY-FORMATS §2.1) into Step snapshots.

Stateful because stream-json sends text as deltas: the decoder accumulates them per step index.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.step import (
    Step,
    StepKind,
    StepStatus,
    StepUsage,
    ToolCall,
    ToolResult,
    TurnOutcome,
)
from agy_provider.errors import DecodeError

__all__ = ["StreamJsonDecoder", "stream_json_usage"]

_KINDS: Mapping[str, StepKind] = {
    "user_input": StepKind.USER,
    "agent_response": StepKind.ASSISTANT,
    "tool": StepKind.TOOL,
    "subagent": StepKind.TOOL,
    "checkpoint": StepKind.CHECKPOINT,
}

_STATES: Mapping[str, StepStatus] = {
    "ACTIVE": StepStatus.RUNNING,
    "DONE": StepStatus.DONE,
    "ERROR": StepStatus.ERROR,
    "CANCELED": StepStatus.CANCELED,
}

_OK_RESULTS = frozenset({"SUCCESS", "OK"})


def stream_json_usage(value: Any) -> StepUsage | None:
    """`{input_tokens, output_tokens, cache_read_tokens, ...}` -> StepUsage (output includes thinking)."""
    if not isinstance(value, dict):
        return None
    try:
        return StepUsage(
            input=int(value.get("input_tokens", 0)),
            output=int(value.get("output_tokens", 0)),
            cache_read=int(value.get("cache_read_tokens", 0)),
            cache_write=int(value.get("cache_write_tokens", 0)),
        )
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"usage is not numeric: {value!r}") from exc


class StreamJsonDecoder:
    """Feed one parsed stream-json object at a time; get the Step it changed, or the turn's end.

    `feed` returns a `Step` for a step_update, a `TurnOutcome` for a result, and `None` for events
    that carry no step (init). `conversation_id` is learned from init (the only place agy states it).
    """

    def __init__(self) -> None:
        self.conversation_id = ""
        self._steps: dict[int, Step] = {}

    def feed(self, event: Mapping[str, Any]) -> Step | TurnOutcome | None:
        kind = event.get("event")
        if kind == "init":
            self.conversation_id = str(event.get("conversation_id", ""))
            return None
        if kind == "step_update":
            body = event.get("step_update")
            if not isinstance(body, dict):
                raise DecodeError("step_update without an object body")
            return self._update(body)
        if kind == "result":
            body = event.get("result")
            if not isinstance(body, dict):
                raise DecodeError("result without an object body")
            return self._result(body)
        if kind == "user":
            return None  # our own input echoed back in --input-format stream-json
        raise DecodeError(f"unknown stream-json event {kind!r}")

    def _update(self, body: Mapping[str, Any]) -> Step:
        try:
            index = int(body["step_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError("step_update without a numeric step_index") from exc
        step_kind = _KINDS.get(str(body.get("step_type", "")), StepKind.UNKNOWN)
        status = _STATES.get(str(body.get("state", "")), StepStatus.UNSPECIFIED)
        if step_kind is StepKind.ASSISTANT and status is StepStatus.RUNNING:
            status = StepStatus.GENERATING
        previous = self._steps.get(index)
        text = previous.text if previous is not None else ""
        if isinstance(body.get("text_delta"), str):
            text += body["text_delta"]
        error_info = body.get("error")
        error = str(error_info.get("message", "")) if isinstance(error_info, dict) else ""
        tool: ToolCall | None = None
        result: ToolResult | None = None
        if step_kind is StepKind.TOOL:
            info = body.get("tool_info") if isinstance(body.get("tool_info"), dict) else {}
            assert isinstance(info, dict)
            name = str(info.get("name") or body.get("tool_name") or "tool")
            params = info.get("parameters")
            if isinstance(params, str):
                try:
                    params = json.loads(params)
                except ValueError:
                    params = {}
            tool = ToolCall(id="", name=name, arguments=params if isinstance(params, dict) else {})
            output = body.get("output", info.get("output"))
            if status.terminal:
                result = ToolResult(
                    output=str(output) if output is not None else error,
                    is_error=status is StepStatus.ERROR,
                )
        step = Step(
            index=index,
            kind=step_kind,
            status=status,
            text=text if step_kind is StepKind.ASSISTANT else "",
            tool=tool,
            result=result,
            usage=stream_json_usage(body.get("usage")) or (previous.usage if previous else None),
            error=error,
            conversation_id=str(body.get("conversation_id") or self.conversation_id),
        )
        if (
            previous is not None
            and previous.tool is not None
            and step.tool is not None
            and not step.tool.arguments
            and previous.tool.arguments
        ):
            # A later update without parameters keeps the ones an earlier update gave.
            step = dataclasses.replace(step, tool=previous.tool)
        self._steps[index] = step
        return step

    def _result(self, body: Mapping[str, Any]) -> TurnOutcome:
        status = str(body.get("status", "")).upper()
        error = body.get("error")
        message = error.get("message", "") if isinstance(error, dict) else (error or "")
        return TurnOutcome(
            ok=status in _OK_RESULTS,
            aborted=status in ("CANCELED", "CANCELLED"),
            error=str(message)
            or ("" if status in _OK_RESULTS else f"agy ended the turn: {status}"),
            usage=stream_json_usage(body.get("usage")),
        )
