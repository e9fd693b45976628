"""What `agy -p` prints: the text answer, the json result, and stream-json lines (AGY-FORMATS §2.1).

Owns `StreamJsonPrinter`, which turns committed Steps into `step_update` lines with text deltas,
in the shapes of the agy version imitated (§2.2): compact JSON as Go writes it; tool outcomes at
the update's top level (≤ 1.1.17) or in `tool_info` (1.1.18+); `system_message`,
`error_message`, `subagent` and (1.3.x) `finish` steps; the checkpoint with its title call's
usage.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from typing import TextIO

from agy_provider.sim import descriptors as pb
from agy_provider.sim.payloads import ARGUMENT_META_KEYS
from agy_provider.sim.scenario import Usage
from agy_provider.sim.turn_values import usage_json
from agy_provider.sim.versions import AgyVersion
from agy_provider.sim.versions import sim_version

__all__ = ["StreamJsonPrinter", "dumps", "emit_line"]

_TY = pb.STEP_TYPE
_ST = pb.STEP_STATUS
_TERMINAL = {
    _ST["CORTEX_STEP_STATUS_DONE"],
    _ST["CORTEX_STEP_STATUS_ERROR"],
    _ST["CORTEX_STEP_STATUS_CANCELED"],
}
_CHILD_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TOOL_TYPES = {
    _TY["CORTEX_STEP_TYPE_GENERIC"],
    _TY["CORTEX_STEP_TYPE_ASK_QUESTION"],
    _TY["CORTEX_STEP_TYPE_RUN_COMMAND"],
    _TY["CORTEX_STEP_TYPE_VIEW_FILE"],
    _TY["CORTEX_STEP_TYPE_LIST_DIRECTORY"],
    _TY["CORTEX_STEP_TYPE_MCP_TOOL"],
}


def dumps(event: dict[str, Any]) -> str:
    """One event as agy (Go's encoding/json) writes it: compact, UTF-8."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def emit_line(stream: TextIO, event: dict[str, Any]) -> None:
    """Write one NDJSON line and flush it (agy flushes each line)."""
    stream.write(dumps(event) + "\n")
    stream.flush()


class StreamJsonPrinter:
    """Listens to one conversation's commits and prints agy's `step_update` lines."""

    def __init__(
        self,
        conversation_id: str,
        write: Callable[[dict[str, Any]], None],
        now: Callable[[], float] = time.monotonic,
        version: AgyVersion | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.write = write
        self.now = now
        self.version = version or sim_version()
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
            return self._checkpoint(index, step, state)
        if step.type == _TY["CORTEX_STEP_TYPE_SYSTEM_MESSAGE"]:
            return self._once(index, state, self._base(index, state, "system_message"))
        if step.type == _TY["CORTEX_STEP_TYPE_FINISH"]:
            return self._once(index, state, self._base(index, state, "finish"))  # 1.3.x
        if step.type == _TY["CORTEX_STEP_TYPE_ERROR_MESSAGE"]:
            update = self._base(index, state, "error_message")
            details = step.error_message.error
            message = details.short_error or details.user_error_message
            update["error"] = {"type": "MODEL_ERROR", "message": message}
            return self._once(index, state, update)
        if step.type == _TY["CORTEX_STEP_TYPE_PLANNER_RESPONSE"]:
            return self._planner(index, step, state)
        if step.type in _TOOL_TYPES and step.metadata.tool_call.name == "invoke_subagent":
            return self._subagent(index, step, state)
        if step.type in _TOOL_TYPES:
            return self._tool(index, step, state)
        return None

    def _checkpoint(self, index: int, step: Any, state: str) -> dict[str, Any] | None:
        update = self._base(index, state, "checkpoint")
        if self.version.new_stream_shapes and state != "ACTIVE":
            update["duration_seconds"] = self._duration(index)
            # 1.1.20 captures show the title call's duration only; 1.2.x adds its usage.
            if step.metadata.HasField("model_usage") and self.version.at_least("1.2.0"):
                update["usage"] = self._usage(step.metadata.model_usage)
        return self._once(index, state, update)

    @staticmethod
    def _usage(usage: Any) -> dict[str, int]:
        return usage_json(
            Usage(
                input=usage.input_tokens,
                thinking=usage.thinking_output_tokens,
                response=usage.output_tokens - usage.thinking_output_tokens,
                cache_read=usage.cache_read_tokens,
            )
        )

    def _subagent(self, index: int, step: Any, state: str) -> dict[str, Any] | None:
        """`subagent` steps carry `subagent_info`; their DONE repeats ACTIVE, without a result."""
        state = "ACTIVE" if state == "ACTIVE" else "DONE"
        if self._state.get(index) == state:
            return None
        try:
            arguments = json.loads(step.metadata.tool_call.arguments_json or "{}")
        except ValueError:
            arguments = {}
        child = _CHILD_ID.search(step.generic.result.result)
        if child is None and state == "ACTIVE":
            return None  # printed once the launch names its child conversation
        agents = []
        for spec in arguments.get("Subagents", []) if isinstance(arguments, dict) else []:
            if not isinstance(spec, dict):
                continue
            child_id = child.group(0) if child else ""
            agents.append(
                {
                    "type_name": str(spec.get("TypeName", "")),
                    "role": str(spec.get("Role", "")),
                    "initial_prompt": str(spec.get("Prompt", "")),
                    "conversation_id": child_id,
                    "log_uri": f"file:///tmp/agy-sim/{child_id}.log",
                    "workspace_uris": ["file:///tmp/project"],
                }
            )
        self._state[index] = state
        update = self._base(index, state, "subagent")
        update["subagent_info"] = {"subagents": agents}
        return update

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
                update["usage"] = self._usage(usage)
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
        # 1.1.17 put the outcome beside tool_info; 1.1.18+ puts it inside (AGY-FORMATS §2.2).
        target = info if self.version.new_stream_shapes else update
        if state == "ERROR":
            if not self.version.new_stream_shapes and "denied" in step.error.full_error:
                message = "permission check failed"
            else:
                message = step.error.full_error or step.error.short_error
            target["error"] = {"type": "TOOL_ERROR", "message": message}
        elif self.version.new_stream_shapes:
            target["output"] = _raw_output(step)
        else:
            target["output"] = step.generic.result.result if step.HasField("generic") else ""
        return update


def _raw_output(step: Any) -> str:
    """What the tool printed, as 1.1.18+ puts it in `tool_info.output` (not the model's summary)."""
    if step.HasField("mcp_tool"):
        return str(step.mcp_tool.result_string)
    if not step.HasField("generic"):
        return ""
    result = step.generic.result
    if result.HasField("payload"):
        inner = pb.Step()
        if result.payload.Unpack(inner):
            if inner.HasField("run_command"):
                return str(inner.run_command.combined_output.full)
            if inner.HasField("view_file"):
                return str(inner.view_file.content)
    return str(result.result)
