"""Large synthetic conversations for tests and benchmarks, written with the simulator's writer.

Each turn is a user step, a planner step with thinking, a generic run_command tool step with the
legacy step embedded, and a final planner answer: the row shapes agy writes, at any length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agy_provider.sim import descriptors as pb
from agy_provider.sim.writer import ConversationWriter

__all__ = ["STEPS_PER_TURN", "planner_step", "write_conversation"]

STEPS_PER_TURN = 4
_T = pb.STEP_TYPE
_S = pb.STEP_STATUS


def _step(kind: str, status: str = "CORTEX_STEP_STATUS_DONE") -> Any:
    step = pb.Step()
    step.type = _T[f"CORTEX_STEP_TYPE_{kind}"]
    step.status = _S[status]
    step.metadata.created_at.seconds = 1_788_244_182
    return step


def planner_step(text: str, thinking: str = "", *, status: str = "CORTEX_STEP_STATUS_DONE") -> Any:
    """A planner step; an empty `text` and `thinking` make agy's placeholder row."""
    step = _step("PLANNER_RESPONSE", status)
    if text or thinking:
        step.planner_response.response = text
        step.planner_response.modified_response = text
        step.planner_response.thinking = thinking
        step.planner_response.message_id = "bot-1"
        usage = step.metadata.model_usage
        usage.input_tokens = 1200
        usage.output_tokens = 80
        usage.cache_read_tokens = 9000
    return step


def _turn(n: int, text_size: int) -> list[Any]:
    user = _step("USER_INPUT")
    user.user_input.user_response = f"request {n}"
    user.user_input.items.add().text = f"request {n}"
    filler = ("lorem ipsum dolor sit amet " * (1 + text_size // 27))[:text_size]
    first = planner_step("", f"Thinking about request {n}. {filler}")
    tool = _step("GENERIC")
    call = tool.metadata.tool_call
    call.id = f"call{n}"
    call.name = "run_command"
    call.arguments_json = json.dumps({"CommandLine": f"echo {n}", "Cwd": "/tmp"})
    for key, value in (("CommandLine", f"echo {n}"), ("Cwd", "/tmp")):
        tool.generic.args[key] = value
    legacy = _step("RUN_COMMAND")
    legacy.run_command.command_line = f"echo {n}"
    legacy.run_command.exit_code = 0
    legacy.run_command.combined_output.full = f"{n}\n{filler}"
    tool.generic.result.result = f"The command exited with code 0.\nOutput:\n{n}"
    tool.generic.result.payload.Pack(legacy)
    answer = planner_step(f"Done with request {n}. {filler}")
    return [user, first, tool, answer]


def write_conversation(
    path: Path, conversation_id: str, *, turns: int, text_size: int = 200
) -> ConversationWriter:
    """Write `turns` complete turns (STEPS_PER_TURN rows each) in one bulk transaction.

    Returns the open writer so callers can go on appending or rewriting rows live.
    """
    writer = ConversationWriter(path, conversation_id)
    with writer.bulk():
        for n in range(turns):
            for step in _turn(n, text_size):
                writer.append(step)
    return writer
