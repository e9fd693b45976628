"""Builders for the protobuf messages agy writes: steps, tool results, usage, generator records.

Owns the shape of every `gemini_coder.Step` the simulator writes (modelled on real agy 1.1.23 rows).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from agy_provider.sim import descriptors as pb
from agy_provider.sim.scenario import CatalogModel
from agy_provider.sim.scenario import QuestionSpec
from agy_provider.sim.scenario import ToolSpec
from agy_provider.sim.scenario import Usage

__all__ = [
    "ARGUMENT_META_KEYS",
    "IdSource",
    "StepFactory",
    "tool_arguments",
    "tool_result_text",
]

ST = pb.STEP_STATUS
TY = pb.STEP_TYPE
SRC = pb.STEP_SOURCE

# Keys the model writes on every tool call besides the tool's own arguments.
ARGUMENT_META_KEYS = ("toolAction", "toolSummary")

# Legacy typed step per tool name: (step type, Step field) embedded at 140.2.6.
_LEGACY = {
    "run_command": (TY["CORTEX_STEP_TYPE_RUN_COMMAND"], "run_command"),
    "view_file": (TY["CORTEX_STEP_TYPE_VIEW_FILE"], "view_file"),
    "list_dir": (TY["CORTEX_STEP_TYPE_LIST_DIRECTORY"], "list_directory"),
}


class IdSource:
    """UUIDs and call ids: random, or reproducible from `seed` (record mode)."""

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed) if seed is not None else None

    def uuid(self) -> str:
        if self._random is None:
            return str(uuid.uuid4())
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def call_id(self) -> str:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        rng = self._random or random.SystemRandom()
        return "".join(rng.choice(alphabet) for _ in range(8))


def tool_arguments(tool: ToolSpec) -> dict[str, Any]:
    """The tool call's argument object as the model wrote it (PascalCase + toolAction/Summary)."""
    args = dict(tool.args)
    args["toolAction"] = tool.tool_action or f"Running {tool.name}"
    args["toolSummary"] = tool.tool_summary or tool.name.replace("_", " ").capitalize()
    return args


def tool_result_text(tool: ToolSpec) -> str:
    """The text agy stores at 140.2.1 (what the model is shown)."""
    if tool.name == "run_command":
        return f"\nThe command exited with code {tool.exit_code}.\nOutput:\n{tool.output}\n"
    return tool.output


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class StepFactory:
    """Builds Steps for one turn: `now()` gives timestamps, `execution_id` names the turn."""

    def __init__(self, now: Callable[[], float], execution_id: str, model: CatalogModel) -> None:
        self.now = now
        self.execution_id = execution_id
        self.model = model

    # --- common ----------------------------------------------------------------------------

    def stamp(self, field: Any) -> None:
        field.FromNanoseconds(int(self.now() * 1e9))

    def base(self, step_type: str, source: str) -> Any:
        step = pb.Step()
        step.type = TY[step_type]
        step.metadata.source = SRC[source]
        step.metadata.execution_id = self.execution_id
        self.stamp(step.metadata.created_at)
        return step

    def move(self, step: Any, status: str) -> None:
        """Set the status and record the transition (5.26.1) as agy does."""
        step.status = ST[status]
        transition = step.metadata.internal_metadata.status_transitions.add()
        transition.updated_status = ST[status]
        self.stamp(transition.timestamp)

    def usage(self, usage: Usage, *, model: CatalogModel | None = None) -> Any:
        model = model or self.model
        stats = pb.ModelUsageStats()
        stats.model = pb.model_enum_number(model.placeholder)
        stats.input_tokens = usage.input
        stats.output_tokens = usage.output
        stats.cache_read_tokens = usage.cache_read
        stats.thinking_output_tokens = usage.thinking
        stats.response_output_tokens = usage.response
        stats.api_provider = {
            "API_PROVIDER_ANTHROPIC_VERTEX": 26,
            "API_PROVIDER_OPENAI_VERTEX": 31,
        }.get(model.provider, pb.API_PROVIDER_GOOGLE_GEMINI)
        stats.response_header["sessionID"] = "-3750763034362895579"
        return stats

    def generator_record(self, usage: Any, model: CatalogModel, step_index: int) -> Any:
        """One gen_metadata record: chat_model {model, usage, retry mirror, slug, name}."""
        record = pb.CortexStepGeneratorMetadata()
        chat = record.chat_model
        chat.model = pb.model_enum_number(model.placeholder)
        chat.usage.CopyFrom(usage)
        chat.retry_infos.add().usage.CopyFrom(usage)
        chat.response_model = model.slug
        chat.model_display_name = model.name
        record.step_indices.append(step_index)
        record.execution_id = self.execution_id
        return record

    # --- the steps -------------------------------------------------------------------------

    def user_input(self, prompt: str) -> Any:
        step = self.base("CORTEX_STEP_TYPE_USER_INPUT", "CORTEX_STEP_SOURCE_USER_EXPLICIT")
        step.user_input.user_response = prompt
        step.user_input.items.add().text = prompt
        self.move(step, "CORTEX_STEP_STATUS_DONE")
        return step

    def history(self, content: str) -> Any:
        step = self.base("CORTEX_STEP_TYPE_CONVERSATION_HISTORY", "CORTEX_STEP_SOURCE_SYSTEM")
        step.conversation_history.content = content
        for status in ("PENDING", "RUNNING", "DONE"):
            self.move(step, f"CORTEX_STEP_STATUS_{status}")
        self.stamp(step.metadata.started_at)
        self.stamp(step.metadata.completed_at)
        return step

    def planner_placeholder(self, done: bool) -> Any:
        step = self.base("CORTEX_STEP_TYPE_PLANNER_RESPONSE", "CORTEX_STEP_SOURCE_MODEL")
        step.status = ST["CORTEX_STEP_STATUS_DONE" if done else "CORTEX_STEP_STATUS_PENDING"]
        step.metadata.step_generation_version = 1
        step.metadata.requested_model.model = pb.model_enum_number(self.model.placeholder)
        step.planner_response.SetInParent()
        return step

    def tool_call(self, tool: ToolSpec, call_id: str) -> Any:
        call = pb.message_class("exa.codeium_common_pb.ChatToolCall")()
        call.id = call_id
        call.name = tool.name
        call.arguments_json = _json(tool_arguments(tool))
        call.original_name = tool.name
        return call

    def tool_step(self, tool: ToolSpec, call: Any) -> Any:
        """A tool run as agy ≥ 1.1.x writes it: GENERIC (132), PENDING, args at 140.1."""
        kind = "ASK_QUESTION" if tool.name == "ask_question" else "GENERIC"
        step = self.base(f"CORTEX_STEP_TYPE_{kind}", "CORTEX_STEP_SOURCE_MODEL")
        meta = step.metadata
        meta.step_generation_version = 1
        meta.tool_call.CopyFrom(call)
        args = tool_arguments(tool)
        meta.arguments_order.extend(args)
        meta.tool_summary = args["toolSummary"]
        meta.tool_action = args["toolAction"]
        meta.generator_model = pb.model_enum_number(self.model.placeholder)
        meta.requested_model.model = meta.generator_model
        for field in ("viewable_at", "finished_generating_at", "last_completed_chunk_at"):
            self.stamp(getattr(meta, field))
        if kind == "ASK_QUESTION":
            self._questions(step.ask_question.questions, tool.questions)
        else:
            for key, value in args.items():
                step.generic.args[key] = value if isinstance(value, str) else _json(value)
        self.move(step, "CORTEX_STEP_STATUS_PENDING")
        return step

    def _questions(self, container: Any, questions: tuple[QuestionSpec, ...]) -> None:
        for spec in questions:
            entry = container.add()
            entry.question = spec.question
            entry.is_multi_select = spec.multi_select
            for number, text in enumerate(spec.options, start=1):
                option = entry.options.add()
                option.id = str(number)
                option.text = text

    def request_permission(self, step: Any, tool: ToolSpec) -> None:
        target = str(tool.args.get("CommandLine", tool.args.get("AbsolutePath", tool.name)))
        spec = step.requested_interaction.permission
        spec.resource.action = "command" if tool.name == "run_command" else tool.name
        spec.resource.target = target
        spec.persist_suggestion_type = 1
        spec.suggested_persist_pattern = target
        spec.action_description = tool_arguments(tool)["toolAction"]

    def request_answers(self, step: Any, tool: ToolSpec) -> None:
        self._questions(step.requested_interaction.ask_question.questions, tool.questions)

    def complete_interaction(
        self, step: Any, trajectory_id: str, index: int, answer: Mapping[str, Any]
    ) -> None:
        """Record the answer (147) the way agy does once a WAITING step is resolved."""
        done = step.completed_interactions.add()
        done.request.CopyFrom(step.requested_interaction)
        response = done.response
        response.trajectory_id = trajectory_id
        response.step_index = index
        if "permission" in answer:
            response.permission.allow = bool(answer["permission"].get("allow"))
        elif "askQuestion" in answer:
            for given in answer["askQuestion"].get("responses", []):
                entry = response.ask_question.responses.add()
                entry.question = str(given.get("question", ""))
                entry.selected_option_ids.extend(str(i) for i in given.get("selectedOptionIds", []))
                if given.get("writeInResponse"):
                    entry.write_in_response = str(given["writeInResponse"])
        if "timedOut" in answer:
            response.timed_out = True

    def finish_tool(self, step: Any, tool: ToolSpec) -> None:
        """Fill the result: 140.2.1 text and the legacy typed step as Any at 140.2.6."""
        if step.type == TY["CORTEX_STEP_TYPE_ASK_QUESTION"]:
            return
        result = step.generic.result
        result.result = tool_result_text(tool)
        legacy = _LEGACY.get(tool.name)
        if legacy is None:
            return
        inner = pb.Step()
        inner.type, field = legacy
        inner.status = ST["CORTEX_STEP_STATUS_DONE"]
        inner.metadata.created_at.CopyFrom(step.metadata.created_at)
        inner.metadata.source = step.metadata.source
        inner.metadata.tool_call.CopyFrom(step.metadata.tool_call)
        body = getattr(inner, field)
        if field == "run_command":
            command = str(tool.args.get("CommandLine", ""))
            body.command_line = command
            body.proposed_command_line = command
            body.cwd = str(tool.args.get("Cwd", ""))
            body.wait_ms_before_async = int(tool.args.get("WaitMsBeforeAsync", 5000))
            body.blocking = True
            body.exit_code = tool.exit_code
            body.combined_output.full = tool.output
            body.shell_name = "bash"
        elif field == "view_file":
            body.absolute_path_uri = "file://" + str(tool.args.get("AbsolutePath", ""))
            body.content = tool.output
            body.num_lines = tool.output.count("\n") + (0 if tool.output.endswith("\n") else 1)
            body.num_bytes = len(tool.output.encode())
            body.end_line = max(body.num_lines - 1, 0)
        else:
            body.directory_path_uri = "file://" + str(tool.args.get("DirectoryPath", ""))
            for line in filter(None, tool.output.splitlines()):
                entry = body.results.add()
                entry.name = line.rstrip("/")
                entry.is_dir = line.endswith("/")
        result.payload.Pack(inner, type_url_prefix="type.googleapis.com/")

    def error_details(self, user: str, short: str, full: str, code: int = 0) -> Any:
        details = pb.CortexErrorDetails()
        details.user_error_message = user
        details.short_error = short
        details.full_error = full
        if code:
            details.error_code = code
        return details

    def error_message(self, details: Any) -> Any:
        step = self.base("CORTEX_STEP_TYPE_ERROR_MESSAGE", "CORTEX_STEP_SOURCE_SYSTEM")
        step.error_message.error.CopyFrom(details)
        step.error_message.should_show_user = True
        self.move(step, "CORTEX_STEP_STATUS_DONE")
        return step

    def finish(self) -> Any:
        """The FINISH step 1.3.x writes when the agent's loop ends (body empty; unverified)."""
        step = self.base("CORTEX_STEP_TYPE_FINISH", "CORTEX_STEP_SOURCE_SYSTEM")
        step.finish.SetInParent()
        self.move(step, "CORTEX_STEP_STATUS_DONE")
        return step

    def system_message(self, message: str, event_type: str) -> Any:
        step = self.base("CORTEX_STEP_TYPE_SYSTEM_MESSAGE", "CORTEX_STEP_SOURCE_SYSTEM")
        step.system_message.message = message
        step.system_message.event_type = event_type
        self.move(step, "CORTEX_STEP_STATUS_DONE")
        return step

    def checkpoint(self, title: str, requests: list[str], end_index: int, usage: Any) -> Any:
        step = self.base("CORTEX_STEP_TYPE_CHECKPOINT", "CORTEX_STEP_SOURCE_SYSTEM")
        for status in ("PENDING", "RUNNING"):
            self.move(step, f"CORTEX_STEP_STATUS_{status}")
        self.stamp(step.metadata.started_at)
        step.metadata.model_usage.CopyFrom(usage)
        body = step.checkpoint
        body.intent_only = True
        body.included_step_index_end = end_index
        body.user_intent = title
        body.user_requests.extend(requests)
        body.render_latest_checkpoint = True
        body.render_user_message_step_index = 0
        self.move(step, "CORTEX_STEP_STATUS_DONE")
        self.stamp(step.metadata.completed_at)
        return step
