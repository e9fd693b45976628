"""Turn execution: plays one scenario turn into a conversation database, commit by commit.

Owns `Simulator` (conversations, turns, pending interactions, cancel); the values it plays with
(`Clock`, `Conversation`, `TurnResult`) live in `turn_values`.

The engine is synchronous and single-writer; other threads (the control channel) only call
`answer()` and `cancel()`, which hand values over under one condition variable. Every delay goes
through `Clock`, so `AGY_SIM_SPEED` scales them all and record mode gets reproducible timestamps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agy_provider.sim import descriptors as pb
from agy_provider.sim.image_views import VIEWED_IMAGES_PLACEHOLDER
from agy_provider.sim.image_views import image_views
from agy_provider.sim.payloads import IdSource
from agy_provider.sim.payloads import StepFactory
from agy_provider.sim.scenario import MCP_RESULT_PLACEHOLDER
from agy_provider.sim.scenario import CatalogModel
from agy_provider.sim.scenario import ErrorSpec
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import Scenario
from agy_provider.sim.scenario import StepSpec
from agy_provider.sim.scenario import SubagentSpec
from agy_provider.sim.scenario import SystemMessageSpec
from agy_provider.sim.scenario import ToolSpec
from agy_provider.sim.scenario import TurnPlay
from agy_provider.sim.scenario import Usage
from agy_provider.sim.turn_values import AutoDenied
from agy_provider.sim.turn_values import Canceled
from agy_provider.sim.turn_values import Clock
from agy_provider.sim.turn_values import Conversation
from agy_provider.sim.turn_values import PrintTimeout
from agy_provider.sim.turn_values import SimCrash
from agy_provider.sim.turn_values import SimTurn
from agy_provider.sim.turn_values import TurnFailed
from agy_provider.sim.turn_values import TurnResult
from agy_provider.sim.turn_values import add_usage
from agy_provider.sim.turn_values import settle_denial
from agy_provider.sim.turn_values import turn_totals
from agy_provider.sim.versions import AgyVersion
from agy_provider.sim.versions import sim_version
from agy_provider.sim.writer import ConversationWriter

__all__ = ["Clock", "Conversation", "SimCrash", "Simulator", "StepListener", "TurnResult"]

ST = pb.STEP_STATUS
StepListener = Callable[[str, int, Any], None]
_TITLE_MODEL = CatalogModel("gemini-2.5-flash-lite", "Gemini 2.5 Flash Lite", 50)
_TITLE_USAGE = Usage(input=35, response=3)


class Simulator:
    """Runs scenario turns into conversation databases under `conversations_dir`.

    `listeners` are called after every commit with (conversation id, step index, Step).
    `skip_permissions` is `--dangerously-skip-permissions`. `ids` makes uuids reproducible.
    `version` is the agy imitated (default `AGY_SIM_VERSION`, else the newest); `strict` denies
    every permission at once, as agy's strict permission settings do. `mcp_roots` are the
    `--add-dir` roots whose `.agents/mcp_config.json` name the MCP servers a turn can call.
    """

    def __init__(
        self,
        scenario: Scenario,
        conversations_dir: Path,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        skip_permissions: bool = False,
        on_commit: Callable[[str], None] | None = None,
        on_conversation: Callable[[Conversation], None] | None = None,
        version: AgyVersion | None = None,
        strict: bool | None = None,
        mcp_roots: Sequence[str] = (),
    ) -> None:
        self.scenario = scenario
        self.mcp_roots = tuple(mcp_roots)
        self.version = version or sim_version()
        self.strict = scenario.permission_mode == "strict" if strict is None else strict
        self.dir = conversations_dir
        self.clock = clock or Clock()
        self.ids = ids or IdSource()
        self.skip_permissions = skip_permissions
        self.listeners: list[StepListener] = []
        self.on_commit = on_commit
        self.on_conversation = on_conversation
        self.conversations: dict[str, Conversation] = {}
        self._turn_lock = threading.Lock()
        self._cond = threading.Condition()
        self._waiting: tuple[str, int, str] | None = None
        self._answer: Mapping[str, Any] | None = None
        self._cancel = False
        self._running: tuple[str, int] | None = None

    # --- conversations ---------------------------------------------------------------------

    def open(self, conversation_id: str | None = None, *, parent: str = "") -> Conversation:
        """Create (or reopen, when its database exists) a conversation."""
        cid = conversation_id or self.ids.uuid()
        if cid in self.conversations:
            return self.conversations[cid]
        path = self.dir / f"{cid}.db"
        fresh = not path.exists()
        writer = ConversationWriter(
            path,
            cid,
            trajectory_id=self.ids.uuid() if fresh else "",
            source=pb.TRAJECTORY_SOURCE_SUBAGENT if parent else pb.TRAJECTORY_SOURCE_CLI,
            parent_conversation_id=parent,
            created_at=self.clock.now(),
            commit_delay=self.clock.real(self.scenario.faults.commit_delay_ms / 1000),
            on_commit=lambda: self._committed(cid),
        )
        conversation = Conversation(cid, writer)
        if not fresh:
            conversation.turns, conversation.usage_total, conversation.duration_total = turn_totals(
                writer
            )
        self.conversations[cid] = conversation
        if self.on_conversation is not None:
            self.on_conversation(conversation)
        return conversation

    def _committed(self, conversation_id: str) -> None:
        if self.on_commit is not None:
            self.on_commit(conversation_id)

    # --- control (other threads) -----------------------------------------------------------

    def answer(
        self, conversation_id: str, step_index: int, answer: Mapping[str, Any]
    ) -> tuple[bool, str]:
        """Hand an interaction answer to the WAITING step; (False, agy's message) when stale."""
        kind = "permission" if "permission" in answer else "askQuestion"
        with self._cond:
            if self._waiting != (conversation_id, step_index, kind) or self._answer is not None:
                return False, f"input not registered for step {step_index}"
            self._answer = answer
            self._cond.notify_all()
        return True, ""

    def cancel(self, conversation_id: str, step_indices: list[int] | None = None) -> None:
        """Stop RUNNING work (a WAITING step is left alone, as agy does)."""
        with self._cond:
            running = self._running
            if running is None or running[0] != conversation_id:
                return
            if step_indices is None or running[1] in step_indices:
                self._cancel = True
                self._cond.notify_all()

    # --- timing ----------------------------------------------------------------------------

    def _sleep(self, turn: SimTurn, nominal: float) -> None:
        """Sleep `nominal` scenario seconds; honour cancel and `--print-timeout`."""
        end = time.monotonic() + self.clock.real(nominal)
        if turn.deadline is not None:
            end = min(end, turn.deadline)
        with self._cond:
            while not self._cancel:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._cancel:
                self._cancel = False
                raise Canceled
        if turn.deadline is not None and time.monotonic() >= turn.deadline:
            raise PrintTimeout
        self.clock.advance(nominal)

    def _await(
        self, turn: SimTurn, index: int, kind: str, timeout_ms: int
    ) -> Mapping[str, Any] | None:
        cid = turn.conversation.id
        end = time.monotonic() + self.clock.real(timeout_ms / 1000)
        with self._cond:
            self._waiting, self._answer, self._running = (cid, index, kind), None, None
            try:
                while self._answer is None:
                    limit = end if turn.deadline is None else min(end, turn.deadline)
                    remaining = limit - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                answer = self._answer
            finally:
                self._waiting, self._answer = None, None
                self._running = (cid, index)
        if answer is None and turn.deadline is not None and time.monotonic() >= turn.deadline:
            raise PrintTimeout
        return answer

    # --- writing ---------------------------------------------------------------------------

    def _faults_before(self, turn: SimTurn, index: int) -> None:
        faults = self.scenario.faults
        if faults.crash_at_step == index:
            message = faults.crash_message or (
                "panic: runtime error: invalid memory address or nil pointer dereference\n"
                "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x1c3e2f4]\n\n"
                "goroutine 1 [running]:\n"
                "google3/third_party/jetski/cortex/executor.(*Executor).runStep(...)"
            )
            raise SimCrash(faults.crash_exit_code, message)
        if faults.hang_at_step == index:
            while True:  # the hang fault: alive, silent, forever
                time.sleep(3600)
        if faults.lock is not None and faults.lock.at_step == index:
            turn.conversation.writer.hold_exclusive(self.clock.real(faults.lock.ms / 1000))

    def _append(self, turn: SimTurn, step: Any, conversation: Conversation | None = None) -> int:
        conversation = conversation or turn.conversation
        self._faults_before(turn, conversation.writer.step_count)
        index = conversation.writer.append(step)
        self._notify(conversation, index, step)
        return index

    def _update(
        self, turn: SimTurn, index: int, step: Any, conversation: Conversation | None = None
    ) -> None:
        conversation = conversation or turn.conversation
        writer = conversation.writer
        if self.scenario.faults.corrupt_step == index and step.status in (
            ST["CORTEX_STEP_STATUS_DONE"],
            ST["CORTEX_STEP_STATUS_ERROR"],
        ):
            good = step.SerializeToString()
            # Cut mid-message and end on a length prefix that promises far more than follows.
            writer.write_raw(
                index,
                step.type,
                step.status,
                good[: max(1, len(good) // 2)] + b"\x92\x01\xff\xff\x03",
            )
        else:
            writer.update(index, step)
        self._notify(conversation, index, step)

    def _notify(self, conversation: Conversation, index: int, step: Any) -> None:
        for listener in self.listeners:
            listener(conversation.id, index, step)

    # --- the turn --------------------------------------------------------------------------

    def run_turn(
        self,
        conversation: Conversation,
        prompt: str,
        *,
        model: CatalogModel | None = None,
        deadline: float | None = None,
        play: TurnPlay | None = None,
    ) -> TurnResult:
        """Play one turn of the scenario. `deadline` (monotonic) is `--print-timeout`; `play`
        makes this one turn another scenario's (its faults counted from the turn's first row).

        Raises `SimCrash` for the crash fault; every other outcome is in the `TurnResult`.
        """
        with self._turn_lock:
            base = self.scenario
            if play is not None:
                self.scenario = play.scenario_at(conversation.writer.step_count)
            try:
                return self._play(conversation, prompt, model, deadline)
            finally:
                self.scenario = base

    def _play(
        self,
        conversation: Conversation,
        prompt: str,
        model: CatalogModel | None,
        deadline: float | None,
    ) -> TurnResult:
        started = time.monotonic()
        model = model or self.scenario.find_model(self.scenario.model) or self.scenario.catalog[0]
        factory = StepFactory(self.clock.now, self.ids.uuid(), model)
        turn = SimTurn(conversation, factory, model, deadline)
        result = TurnResult(conversation.id, num_turns=conversation.turns + 1, version=self.version)
        spec = self.scenario.turn(conversation.turns)
        conversation.turns += 1
        try:
            if self.scenario.quota_exhausted:
                # agy checks the quota before the turn starts: no step, exit 1 (§2.2); 1.3.x
                # exits 3 with its AGY_ERROR line on stderr (§2.3).
                words = self.scenario.quota_exhausted
                if self.version.agy_error_exit:
                    agy_error = f"AGY_ERROR: RESOURCE_EXHAUSTED (code 429): {words}"
                    raise TurnFailed(words, 3, agy_error)
                raise TurnFailed(words, 1)
            self._run_steps(turn, prompt, spec.steps)
            if self.version.finish_steps:
                self._append(turn, factory.finish())
        except AutoDenied as denied:
            turn.response = ""
            settle_denial(self.version, result, denied)
        except PrintTimeout:
            self._settle_current(turn, "CORTEX_STEP_STATUS_CANCELED")
            turn.response = ""
        except Canceled:
            self._settle_current(turn, "CORTEX_STEP_STATUS_CANCELED")
            result.status = "CANCELED"
        except TurnFailed as failed:
            result.status, result.error, result.exit_code = (
                "ERROR",
                str(failed),
                failed.exit_code,
            )
            result.stderr = failed.stderr or result.stderr
        finally:
            for thread in turn.threads:
                thread.join()
            with self._cond:
                self._running, self._cancel = None, False
        conversation.prompts.append(prompt)
        result.response = turn.response if result.status != "ERROR" else ""
        usage = turn.usage
        if self.version.new_stream_shapes:
            # agy's own side calls (the title) count in the result, on no agent step.
            usage = add_usage(usage, turn.title_usage)
        duration = time.monotonic() - started
        conversation.usage_total = add_usage(conversation.usage_total, usage)
        conversation.duration_total += duration
        if self.version.new_stream_shapes:
            result.usage = conversation.usage_total
            result.duration_seconds = conversation.duration_total
        else:
            result.usage, result.duration_seconds = usage, duration
        return result

    def _settle_current(self, turn: SimTurn, status: str) -> None:
        if turn.current is None:
            return
        index, step = turn.current
        if step.status not in (ST["CORTEX_STEP_STATUS_DONE"], ST["CORTEX_STEP_STATUS_ERROR"]):
            turn.factory.move(step, status)
            self._update(turn, index, step)

    def _run_steps(self, turn: SimTurn, prompt: str, steps: tuple[StepSpec, ...]) -> None:
        f = turn.factory
        first_turn = turn.conversation.turns == 1
        self._append(turn, f.user_input(prompt))
        # 1.1.18+ titles a fresh conversation first: its checkpoint is the row right after the
        # user step (index 1, no history row); older builds write history, then the checkpoint
        # once the turn is done (AGY-FORMATS §2.2; agy 1.0.10's RPC capture).
        early_checkpoint = first_turn and self.version.new_stream_shapes
        if early_checkpoint:
            self._checkpoint(turn, prompt)
        else:
            prompts = turn.conversation.prompts
            history = "" if first_turn else "\n".join(f"USER: {p}" for p in prompts)
            self._append(turn, f.history(history))
        views = image_views(prompt, self.mcp_roots)
        if views is not None:  # the prompt asks to view images: one model call views them
            self._planner(turn, views.planner)
            turn.viewed_images = views.summary
        for item in steps:
            if isinstance(item, PlannerSpec):
                self._planner(turn, item)
            elif isinstance(item, SystemMessageSpec):
                self._append(turn, f.system_message(item.message, item.event_type))
            elif isinstance(item, ErrorSpec):
                self._model_error(turn, item)
            elif isinstance(item, SubagentSpec):
                self._subagent(turn, item)
        if first_turn and not early_checkpoint:
            self._checkpoint(turn, prompt)

    def _planner(self, turn: SimTurn, spec: PlannerSpec) -> None:
        f = turn.factory
        done = (
            self.scenario.placeholder_done
            if spec.placeholder_done is None
            else spec.placeholder_done
        )
        step = f.planner_placeholder(done)
        index = self._append(turn, step)
        turn.current = (index, step)
        self._running = (turn.conversation.id, index)
        self._sleep(turn, spec.first_token_ms / 1000)
        f.move(step, "CORTEX_STEP_STATUS_GENERATING")
        f.stamp(step.metadata.viewable_at)
        body = step.planner_response
        text = spec.text
        if turn.mcp_result is not None:
            text = tuple(c.replace(MCP_RESULT_PLACEHOLDER, turn.mcp_result) for c in text)
        text = tuple(c.replace(VIEWED_IMAGES_PLACEHOLDER, turn.viewed_images) for c in text)
        chunks = [("thinking", c) for c in spec.thinking] + [("modified_response", c) for c in text]
        if not chunks:
            self._update(turn, index, step)
        for number, (field, chunk) in enumerate(chunks):
            if number:
                self._sleep(turn, spec.chunk_ms / 1000)
            setattr(body, field, getattr(body, field) + chunk)
            self._update(turn, index, step)
        calls = [(tool, f.tool_call(tool, self.ids.call_id())) for tool in spec.tools]
        for _, call in calls:
            body.tool_calls.add().CopyFrom(call)
        body.response = body.modified_response
        body.message_id = f"bot-{self.ids.uuid()}"
        body.stop_reason = pb.STOP_REASON["STOP_REASON_STOP_PATTERN"]
        meta = step.metadata
        usage = f.usage(spec.usage)
        usage.message_id = body.message_id
        meta.model_usage.CopyFrom(usage)
        meta.generator_model = usage.model
        for field in ("finished_generating_at", "started_at", "completed_at"):
            f.stamp(getattr(meta, field))
        gen = turn.conversation.writer.add_generator_metadata(
            f.generator_record(usage, turn.model, index)
        )
        meta.source_trajectory_step_info.metadata_index = gen
        f.move(step, "CORTEX_STEP_STATUS_DONE")
        self._update(turn, index, step)
        turn.usage = Usage(
            turn.usage.input + spec.usage.input,
            turn.usage.thinking + spec.usage.thinking,
            turn.usage.response + spec.usage.response,
            turn.usage.cache_read + spec.usage.cache_read,
        )
        if body.response:
            turn.response = body.response
        for tool, call in calls:
            self._tool(turn, tool, call, gen)

    def _tool(self, turn: SimTurn, tool: ToolSpec, call: Any, gen: int, reasks: int = 0) -> None:
        if tool.mcp is not None:
            self._mcp_tool(turn, tool, call, gen)
            return
        f = turn.factory
        step = f.tool_step(tool, call)
        step.metadata.source_trajectory_step_info.metadata_index = gen
        index = self._append(turn, step)
        turn.current = (index, step)
        self._running = (turn.conversation.id, index)
        if tool.name == "ask_question":
            self._question(turn, tool, index, step)
            return
        if tool.needs_permission and not self.skip_permissions:
            verdict = self._permission(turn, tool, index, step, reasks)
            if verdict == "reask":
                self._tool(turn, tool, call, gen, reasks + 1)
                return
            if verdict == "deny":
                return
        f.move(step, "CORTEX_STEP_STATUS_RUNNING")
        f.stamp(step.metadata.started_at)
        self._update(turn, index, step)
        self._sleep(turn, tool.duration_ms / 1000)
        f.finish_tool(step, tool)
        f.move(step, "CORTEX_STEP_STATUS_DONE")
        f.stamp(step.metadata.completed_at)
        self._update(turn, index, step)

    def _mcp_tool(self, turn: SimTurn, tool: ToolSpec, call: Any, gen: int) -> None:
        """A call of a tool an MCP server from the `--add-dir` roots offers (AGY-FORMATS §2)."""
        from agy_provider.sim import mcp_client

        assert tool.mcp is not None
        f, spec = turn.factory, tool.mcp
        servers, problems = mcp_client.read_mcp_servers(self.mcp_roots)
        server = mcp_client.choose_server(servers, spec.server)
        name = server.name if server is not None else spec.server
        step = mcp_client.mcp_tool_step(f, name, spec, call)
        step.metadata.source_trajectory_step_info.metadata_index = gen
        index = self._append(turn, step)
        turn.current = (index, step)
        self._running = (turn.conversation.id, index)
        f.move(step, "CORTEX_STEP_STATUS_RUNNING")
        f.stamp(step.metadata.started_at)
        self._update(turn, index, step)
        if server is None:
            wanted = f"MCP server {spec.server!r}" if spec.server else "an MCP server"
            found = "; ".join(problems) or "no .agents/mcp_config.json in any --add-dir root"
            outcome = mcp_client.McpOutcome(f"{wanted} is not configured ({found})", True)
        else:
            outcome = self._await_mcp(turn, mcp_client.McpToolRun(server, spec, self._wake))
        mcp_client.finish_mcp_tool_step(f, step, outcome)
        self._update(turn, index, step)
        turn.mcp_result = outcome.text

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _await_mcp(self, turn: SimTurn, run: Any) -> Any:
        """The call's outcome; a cancel or `--print-timeout` stops waiting (and the call)."""
        run.start()
        with self._cond:
            while run.outcome is None and not self._cancel:
                remaining = None if turn.deadline is None else turn.deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            outcome = run.outcome
            canceled = outcome is None and self._cancel
            if canceled:
                self._cancel = False
        if outcome is None:
            run.cancel()
            raise Canceled if canceled else PrintTimeout
        return outcome

    def _permission(self, turn: SimTurn, tool: ToolSpec, index: int, step: Any, reasks: int) -> str:
        f, spec = turn.factory, tool.permission
        f.move(step, "CORTEX_STEP_STATUS_WAITING")
        f.request_permission(step, tool)
        self._update(turn, index, step)
        auto_denied = False
        if self.strict:
            answer: Mapping[str, Any] | None = None  # strict settings: denied without asking
        elif spec.auto is not None:
            answer = {"permission": {"allow": spec.auto == "allow"}}
        else:
            answer = self._await(turn, index, "permission", spec.timeout_ms)
        target = step.requested_interaction.permission.resource.target
        action = step.requested_interaction.permission.resource.action
        if answer is None and self.strict:
            f.complete_interaction(step, turn.conversation.trajectory_id, index, {"timedOut": True})
            answer, auto_denied = {"permission": {"allow": False}}, True
        elif answer is None:
            f.complete_interaction(step, turn.conversation.trajectory_id, index, {"timedOut": True})
            if spec.on_timeout == "reask" and reasks < spec.max_reasks:
                step.error.CopyFrom(
                    f.error_details(
                        "Timed out waiting for user input",
                        "timed out",
                        "interaction timed out waiting for user input",
                    )
                )
                f.move(step, "CORTEX_STEP_STATUS_ERROR")
                self._update(turn, index, step)
                return "reask"
            answer, auto_denied = {"permission": {"allow": False}}, True
        else:
            f.complete_interaction(step, turn.conversation.trajectory_id, index, answer)
        grant = step.permissions.permission_grants.add()
        grant.resource.CopyFrom(step.requested_interaction.permission.resource)
        grant.allow = bool(answer["permission"].get("allow"))
        if grant.allow:
            return "allow"
        message = f'permission check failed for command "{target}": user denied permission'
        step.error.CopyFrom(f.error_details(message, "permission check failed", message))
        f.move(step, "CORTEX_STEP_STATUS_ERROR")
        f.stamp(step.metadata.completed_at)
        self._update(turn, index, step)
        turn.denied = message
        if auto_denied:
            raise AutoDenied(message, tool, action)
        return "deny"

    def _question(self, turn: SimTurn, tool: ToolSpec, index: int, step: Any) -> None:
        f = turn.factory
        f.move(step, "CORTEX_STEP_STATUS_RUNNING")
        f.stamp(step.metadata.started_at)
        f.move(step, "CORTEX_STEP_STATUS_WAITING")
        f.request_answers(step, tool)
        self._update(turn, index, step)
        if tool.auto_answer is not None:
            questions = [q.question for q in tool.questions]
            answer: Mapping[str, Any] | None = {
                "askQuestion": {
                    "responses": [
                        {"question": q, "selectedOptionIds": list(tool.auto_answer)}
                        for q in questions
                    ]
                }
            }
        else:
            answer = self._await(turn, index, "askQuestion", tool.permission.timeout_ms)
        if answer is None:
            step.error.CopyFrom(
                f.error_details(
                    "Timed out waiting for user input", "timed out", "ask_question timed out"
                )
            )
            f.move(step, "CORTEX_STEP_STATUS_ERROR")
            self._update(turn, index, step)
            return
        f.complete_interaction(step, turn.conversation.trajectory_id, index, answer)
        responses = step.completed_interactions[-1].response.ask_question.responses
        for entry, given in zip(step.ask_question.questions, responses, strict=False):
            entry.selected_option_ids.extend(given.selected_option_ids)
            if given.write_in_response:
                entry.write_in_response = given.write_in_response
        f.move(step, "CORTEX_STEP_STATUS_RUNNING")
        f.move(step, "CORTEX_STEP_STATUS_DONE")
        f.stamp(step.metadata.completed_at)
        self._update(turn, index, step)

    def _model_error(self, turn: SimTurn, spec: ErrorSpec) -> None:
        f = turn.factory
        step = f.planner_placeholder(False)
        index = self._append(turn, step)
        turn.current = (index, step)
        self._sleep(turn, spec.delay_ms / 1000)
        details = f.error_details(
            spec.user_message, spec.short_error, spec.full_error, spec.error_code
        )
        step.error.CopyFrom(details)
        step.planner_response.stop_reason = pb.STOP_REASON["STOP_REASON_ERROR"]
        f.move(step, "CORTEX_STEP_STATUS_ERROR")
        self._update(turn, index, step)
        self._append(turn, f.error_message(details))
        if self.version.agy_error_exit and spec.exit_code:
            # 1.3.x: exit 3, agy's status name (from the short error) and the user's message
            # on one AGY_ERROR line, as `RESOURCE_EXHAUSTED (code 429): … Resets in 3h20m`.
            status, _, _ = spec.short_error.partition(": ")
            status = status if "(code" in status else "UNKNOWN"
            raise TurnFailed(spec.user_message, 3, f"AGY_ERROR: {status}: {spec.user_message}")
        raise TurnFailed(spec.user_message, spec.exit_code)

    def _checkpoint(self, turn: SimTurn, prompt: str) -> None:
        f = turn.factory
        turn.title_usage = _TITLE_USAGE
        title_usage = f.usage(_TITLE_USAGE, model=_TITLE_MODEL)
        gen = turn.conversation.writer.add_generator_metadata(
            f.generator_record(title_usage, _TITLE_MODEL, turn.conversation.writer.step_count)
        )
        step = f.checkpoint(
            self.scenario.title, [prompt], turn.conversation.writer.step_count, title_usage
        )
        step.metadata.source_trajectory_step_info.metadata_index = gen
        self._append(turn, step)

    def _subagent(self, turn: SimTurn, spec: SubagentSpec) -> None:
        """A child conversation written concurrently with the rest of this turn.

        The parent records the launch as an `invoke_subagent` tool step (a GENERIC row naming
        the child's conversation in its result), which stream-json prints as a `subagent` step.
        """
        child = self.open(parent=turn.conversation.id)
        child.turns += 1
        factory = StepFactory(self.clock.now, self.ids.uuid(), turn.model)
        launch = ToolSpec(
            name="invoke_subagent",
            args={
                "Subagents": [
                    {"TypeName": spec.type_name, "Role": spec.role, "Prompt": spec.prompt}
                ]
            },
            output=f"Started subagent {spec.role} in conversation {child.id}",
            tool_action=f"Delegating to {spec.role}",
            tool_summary="Invoke subagent",
        )
        f = turn.factory
        step = f.tool_step(launch, f.tool_call(launch, self.ids.call_id()))
        index = self._append(turn, step)
        f.move(step, "CORTEX_STEP_STATUS_RUNNING")
        f.stamp(step.metadata.started_at)
        f.finish_tool(step, launch)
        self._update(turn, index, step)

        def run() -> None:
            child.writer.append(factory.user_input(spec.prompt))
            step = factory.planner_placeholder(False)
            index = child.writer.append(step)
            factory.move(step, "CORTEX_STEP_STATUS_GENERATING")
            for chunk in spec.text:
                time.sleep(self.clock.real(spec.chunk_ms / 1000))
                step.planner_response.modified_response += chunk
                child.writer.update(index, step)
            step.planner_response.response = step.planner_response.modified_response
            factory.move(step, "CORTEX_STEP_STATUS_DONE")
            child.writer.update(index, step)

        thread = threading.Thread(target=run, name=f"subagent-{child.id}", daemon=True)
        thread.start()
        turn.threads.append(thread)
        f.move(step, "CORTEX_STEP_STATUS_DONE")
        f.stamp(step.metadata.completed_at)
        self._update(turn, index, step)
