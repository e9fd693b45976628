"""What `agy -p` prints: the text answer, the json result, and stream-json lines (AGY-FORMATS §2.1).

Owns `StreamJsonPrinter`, which turns committed Steps into `step_update` lines with text deltas.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TextIO

from agy_provider.sim import descriptors as pb
from agy_provider.sim.payloads import ARGUMENT_META_KEYS

__all__ = ["StreamJsonPrinter", "emit_line"]

_TY = pb.STEP_TYPE
_ST = pb.STEP_STATUS
_TERMINAL = {
    _ST["CORTEX_STEP_STATUS_DONE"],
    _ST["CORTEX_STEP_STATUS_ERROR"],
    _ST["CORTEX_STEP_STATUS_CANCELED"],
}
_TOOL_TYPES = {
    _TY["CORTEX_STEP_TYPE_GENERIC"],
    _TY["CORTEX_STEP_TYPE_ASK_QUESTION"],
    _TY["CORTEX_STEP_TYPE_RUN_COMMAND"],
    _TY["CORTEX_STEP_TYPE_VIEW_FILE"],
    _TY["CORTEX_STEP_TYPE_LIST_DIRECTORY"],
}


def emit_line(stream: TextIO, event: dict[str, Any]) -> None:
    """Write one NDJSON line and flush it (agy flushes each line)."""
    stream.write(json.dumps(event, ensure_ascii=False) + "\n")
    stream.flush()


class StreamJsonPrinter:
    """Listens to one conversation's commits and prints agy's `step_update` lines."""

    def __init__(
        self,
        conversation_id: str,
        write: Callable[[dict[str, Any]], None],
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conversation_id = conversation_id
        self.write = write
        self.now = now
        self._text: dict[int, int] = {}
        self._state: dict[int, str] = {}
        self._started: dict[int, float] = {}

    def __call__(self, conversation_id: str, index: int, step: Any) -> None:
        if conversation_id != self.conversation_id:
            return
        update = self._update(index, step)
        if update is not None:
            self.write({"event": "step_update", "step_update": update})

    def _base(self, index: int, state: str, kind: str) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "step_index": index,
            "state": state,
            "step_type": kind,
        }

    def _state_of(self, step: Any) -> str:
        if step.status == _ST["CORTEX_STEP_STATUS_ERROR"]:
            return "ERROR"
        return "DONE" if step.status in _TERMINAL else "ACTIVE"

    def _update(self, index: int, step: Any) -> dict[str, Any] | None:
        self._started.setdefault(index, self.now())
        state = self._state_of(step)
        if step.type == _TY["CORTEX_STEP_TYPE_USER_INPUT"]:
            return self._once(index, state, self._base(index, state, "user_input"))
        if step.type == _TY["CORTEX_STEP_TYPE_CHECKPOINT"]:
            return self._once(index, state, self._base(index, state, "checkpoint"))
        if step.type == _TY["CORTEX_STEP_TYPE_PLANNER_RESPONSE"]:
            return self._planner(index, step, state)
        if step.type in _TOOL_TYPES:
            return self._tool(index, step, state)
        return None

    def _once(self, index: int, state: str, update: dict[str, Any]) -> dict[str, Any] | None:
        if self._state.get(index) == state:
            return None
        self._state[index] = state
        return update

    def _duration(self, index: int) -> float:
        return round(self.now() - self._started[index], 6)

    def _planner(self, index: int, step: Any, state: str) -> dict[str, Any] | None:
        body = step.planner_response
        text = body.modified_response or body.response
        seen = self._text.get(index, 0)
        delta = text[seen:] if len(text) > seen else ""
        if not delta and self._state.get(index) == state:
            return None
        if not delta and state == "ACTIVE":
            return None
        self._text[index] = max(seen, len(text))
        self._state[index] = state
        update = self._base(index, state, "agent_response")
        if delta:
            update["text_delta"] = delta
        if state != "ACTIVE":
            update["duration_seconds"] = self._duration(index)
            usage = step.metadata.model_usage
            if step.metadata.HasField("model_usage"):
                update["usage"] = {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "thinking_tokens": usage.thinking_output_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "total_tokens": usage.input_tokens
                    + usage.output_tokens
                    + usage.cache_read_tokens,
                }
            if step.HasField("error"):
                update["error"] = {"type": "MODEL_ERROR", "message": step.error.user_error_message}
        return update

    def _tool(self, index: int, step: Any, state: str) -> dict[str, Any] | None:
        if self._state.get(index) == state:
            return None
        self._state[index] = state
        call = step.metadata.tool_call
        try:
            arguments = json.loads(call.arguments_json or "{}")
        except ValueError:
            arguments = {}
        parameters = {k: v for k, v in arguments.items() if k not in ARGUMENT_META_KEYS}
        update = self._base(index, state, "tool")
        update["tool_name"] = call.name
        info: dict[str, Any] = {"name": call.name, "parameters": parameters}
        update["tool_info"] = info
        if state == "ACTIVE":
            return update
        update["duration_seconds"] = self._duration(index)
        if state == "ERROR":
            message = (
                "permission check failed"
                if "denied" in step.error.full_error
                else step.error.short_error
            )
            update["error"] = {"type": "TOOL_ERROR", "message": message}
        else:
            update["output"] = step.generic.result.result if step.HasField("generic") else ""
        return update
