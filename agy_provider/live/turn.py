"""One live turn in four phases — prepare → launch → pump → settle — with the abort armed throughout.

The driver conducts collaborators, each in a module of its own: planning (`TurnPlanner`), what
the turn opens (`TurnResources`), launching (`launch`), the source handover (`SourceHandover`),
host-tool parking (`HostToolParking`), where events go (`EventOutlet`) and settling (`settle`).
The edges (agy's process, database binding, event sources, session store) come in as `TurnEdges`,
so the orchestration is tested against fakes in milliseconds; nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any

from agy_provider.agy.step import Step
from agy_provider.agy.step import TurnOutcome
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.bridge.host_tools import TurnTools
from agy_provider.contract.parked import HostCall
from agy_provider.contract.sources import EventSource
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import AgyError
from agy_provider.live.abort_scope import until_aborted
from agy_provider.live.discovery import conversations_dir
from agy_provider.live.discovery import snapshot_stems
from agy_provider.live.handover import SourceHandover
from agy_provider.live.handover import database_source
from agy_provider.live.images import newest_images
from agy_provider.live.launch import Forked
from agy_provider.live.launch import bind_turn
from agy_provider.live.launch import exit_outcome
from agy_provider.live.launch import lock_conversation
from agy_provider.live.launch import plan_off_loop
from agy_provider.live.outlet import EventOutlet
from agy_provider.live.parking import PARKED
from agy_provider.live.parking import STOPPED_WAITING
from agy_provider.live.parking import HostToolParking
from agy_provider.live.parking import end_parked
from agy_provider.live.planning import Planned
from agy_provider.live.planning import TurnPlanner
from agy_provider.live.prompt import build_prompt
from agy_provider.live.prompt import history_digest
from agy_provider.live.provider import bare_error
from agy_provider.live.resources import ABORT_GRACE
from agy_provider.live.resources import TurnResources
from agy_provider.live.settle import SessionSave
from agy_provider.live.settle import answering_model
from agy_provider.live.settle import final_message
from agy_provider.live.settle import mark_events
from agy_provider.live.settle import read_answering_model
from agy_provider.live.settle import turn_records
from agy_provider.live.turn_edges import Launched
from agy_provider.live.turn_edges import TurnEdges
from agy_provider.live.turn_edges import TurnPlan
from agy_provider.live.turn_options import TurnOptions
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.stream import TurnFacts
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Model
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.workers import off_loop

__all__ = [
    "PARKED",
    "STOPPED_WAITING",
    "TurnDriver",
    "TurnEdges",
    "TurnPlan",
    "answering_model",
    "bare_error",
    "build_prompt",
    "history_digest",
]

log = logging.getLogger(__name__)

# After an abort: how long cancelling agy's work over RPC may take, and how long the last read
# of what it wrote may take (agy's own grace is `ABORT_GRACE`). Each is a bound, rarely
# reached: the `aborted` event typically follows the signal within tens of ms.
_ABORT_CANCEL = 0.1
_ABORT_LAST_READ = 0.05


class TurnDriver:
    """One turn from the first instant to the final event; each phase a method of its own."""

    def __init__(
        self, model: Model, call: HostCall, assembler: StepAssembler, how: TurnOptions
    ) -> None:
        self.model = model
        self.call = call  # the host's call the turn answers now (a resumed turn: the new one)
        self.assembler = assembler
        self.how = how.in_folder()  # the turn's options, for its whole life
        self.edges = how.turn_edges()
        self.planner = TurnPlanner(self.edges)
        self.planned: Planned | None = None  # what `prepare` decided (the latest plan)
        self.forked_from = ""  # a conversation agy forked: the turn plans again as a new one
        self.outlet = EventOutlet(call.stream, model)  # the host's stream, observers
        self.opened = TurnResources()  # what the turn opens (agy, tools, images, sources, lock)
        self.launched: Launched | None = None  # what `launch` returned (settle takes it)
        # The turn's waits for the host's tool results (host tools offered through the bridge).
        self.parking = HostToolParking()
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop the turn runs on

    def start(self) -> asyncio.Task[None]:
        """Run the turn in a task of the running loop; returns it."""
        self.task = asyncio.get_running_loop().create_task(self.run())
        return self.task

    @property
    def ctx(self) -> TurnContext | None:
        """What plugins see of the turn (None until `prepare` made it)."""
        return self.planned.ctx if self.planned is not None else None

    @property
    def session_id(self) -> str:
        return self.call.options.session_id or ""

    @property
    def source(self) -> EventSource | None:
        """The event source the turn reads now (None before launch opened one)."""
        return self.opened.handover.source if self.opened.handover is not None else None

    @property
    def source_name(self) -> str:
        return self.opened.handover.name if self.opened.handover is not None else ""

    # -- the whole turn ----------------------------------------------------------------------

    async def run(self) -> None:
        """Run the phases; every failure, abort or cancellation becomes the one final event."""
        self.loop = asyncio.get_running_loop()
        outcome: TurnOutcome
        try:
            try:
                outcome = await self._until_aborted(self._phases())
            except AgyError as exc:
                outcome = await self._failed(str(exc))
            except asyncio.CancelledError:
                await self.opened.stop_agy(grace=ABORT_GRACE)
                await self._last_read()
                cancelled = TurnOutcome(aborted=True, error="The turn was cancelled.")
                self._deliver(self._mark(self.assembler.finish(cancelled)), cancelled)
                raise
            except Exception as exc:  # a bug of ours: still a clean error event, never a hang
                log.exception("turn failed")
                outcome = await self._failed(
                    f"agy-provider failed unexpectedly: {type(exc).__name__}: {exc}"
                )
            await self.settle(outcome, self.launched)
        finally:
            await self._cleanup()

    async def _phases(self) -> TurnOutcome:
        # A turn of this session still waiting for the host's tool results will not get them:
        # the host moved on. It ends (and saves the session) before this one reads the store.
        await end_parked(
            PARKED.of_session(self.session_id),
            but=self,
            why="the host started a new turn in this session instead of answering agy's tool call",
        )
        plan, lock = await plan_off_loop(self.prepare)
        self.opened.hold(lock)
        try:
            launched = await self.launch(plan)
        except Forked as forked:
            # agy did not have the conversation after all and silently started another (1.2+):
            # that one lacks the host's history, so it is left, and a new one carries it.
            self.forked_from = plan.conversation_id
            log.warning(
                "agy was asked to resume conversation %s but started %s instead (it no longer "
                "has the first); running the turn again as a new conversation that carries the "
                "host's history",
                plan.conversation_id,
                forked.stated,
            )
            await self._restart()
            plan, lock = await plan_off_loop(self.prepare)
            self.opened.hold(lock)
            launched = await self.launch(plan)
        self.launched = launched
        return await self.pump(launched)

    async def _restart(self) -> None:
        """Undo `launch` (agy, its tools, the lock) so the turn can launch anew."""
        await self.opened.undo()

    async def _until_aborted(self, work: Awaitable[TurnOutcome]) -> TurnOutcome:
        """Run `work`; the host's abort signal cancels it wherever it is (spawn, cold start,
        binding, streaming, draining) and the turn ends `aborted` within ~200 ms."""
        # Asked anew on each swap: a resumed turn watches the new call's options.
        outcome = await until_aborted(
            work, lambda: self.call.options.signal, self.parking.signal_swapped
        )
        return outcome if outcome is not None else await self._aborted()

    async def _aborted(self) -> TurnOutcome:
        if self.source is not None:
            with contextlib.suppress(AgyError, TimeoutError):
                await asyncio.wait_for(self.source.cancel(), _ABORT_CANCEL)
        await self.opened.stop_agy(grace=ABORT_GRACE)
        await self._last_read()
        return TurnOutcome(aborted=True, error="The turn was aborted.")

    async def _failed(self, message: str) -> TurnOutcome:
        await self.opened.stop_agy()
        await self._last_read()
        return TurnOutcome(ok=False, error=message)

    async def _cleanup(self) -> None:
        """End what the turn started (`TurnResources.close`); it no longer waits for the host."""
        PARKED.forget(self)
        await self.opened.close()

    async def _last_read(self) -> None:
        """Whatever the source holds now, bounded: the error message keeps what agy wrote."""
        if self.source is None:
            return
        with contextlib.suppress(AgyError, TimeoutError):
            changed = await asyncio.wait_for(self.source.poll(force=True), _ABORT_LAST_READ)
            self.outlet.emit(self.assembler.feed(changed))

    # -- phase 1: prepare (pure decisions, no process yet: `TurnPlanner`) ---------------------

    def prepare(self) -> TurnPlan:
        """Settings, the session to resume, the prompt, the source and argv (in a worker)."""
        call = self.call
        planned = self.planner.prepare(
            self.model, call.context, call.options, self.how, forked_from=self.forked_from
        )
        self.planned = planned
        self.outlet.observe(planned.ctx, planned.pm)
        self.assembler.begin_after(planned.plan.min_index + 1)
        return planned.plan

    # -- phase 2: launch (spawn, bind, open the source) --------------------------------------

    async def launch(self, plan: TurnPlan) -> Launched:
        """Start agy for `plan` (its tools and images first), bind its database, open the
        chosen source; returns what it launched. What it opened is closed by `_cleanup`."""
        planned, context = self.planned, self.call.context
        assert planned is not None and self.ctx is not None
        if plan.conversation_id:
            await self._hold_conversation(plan)
        folder = conversations_dir(plan.state_dir)
        # Only a new conversation's database is told by what appears (a resumed one has its id).
        before = set() if plan.conversation_id else await off_loop(snapshot_stems, folder)
        if newest_images(context):
            # First: it runs its own agy, whose own MCP bridge serves the host's tools below.
            plan = await self.opened.stage_images(context, plan, unseen=planned.unseen)
            self.ctx.prompt = plan.prompt
        if plan.offers_tools:
            tools = TurnTools(
                context.tools or (),
                turn=self.ctx,
                with_plugins=plan.plugin_tools,
                executor=self.how.tool_executor,
            )
            plan = await self.opened.offer_tools(tools, plan)
            self.assembler.hide_tools(tools.host_step_names)
        request = plan.request
        process = self.ctx.process = self.opened.spawned(self.edges.spawn(request))
        started_at = asyncio.get_running_loop().time()
        await self.opened.start_agy()
        # Learned beside the turn (cached by the binary's identity), for the session record.
        self.opened.ask_version(self.edges.version(request.agy_bin))
        binding = self.ctx.binding = await bind_turn(self.edges, folder, before, process, plan)
        specs = self.edges.sources()
        handover = self.opened.read_from(
            SourceHandover(specs, self.ctx, database=database_source(specs))
        )
        await handover.open(plan.source_name)
        return Launched(
            plan=plan,
            process=process,
            binding=binding,
            handover=handover,
            started_at=started_at,
            print_timeout=request.print_timeout,
        )

    async def _hold_conversation(self, plan: TurnPlan) -> None:
        """One turn at a time per conversation: a turn of it parked on the host's tool results
        ends first (the host moved on); a running one is waited for, at most `turn_timeout`."""
        if self.opened.lock is not None:  # taken in planning: none ran or was parked on it
            return
        await end_parked(
            [t for t in PARKED.all() if t.conversation_id == plan.conversation_id],
            but=self,
            why="the host started a new turn in this conversation instead of answering agy's "
            "tool call",
        )
        self.opened.hold(await lock_conversation(plan))

    @property
    def conversation_id(self) -> str:
        """The agy conversation the turn runs on ("" before that is known)."""
        ctx = self.ctx
        if ctx is None:
            return ""
        if ctx.binding is not None:
            return ctx.binding.conversation_id
        return self.opened.lock.conversation_id if self.opened.lock is not None else ""

    # -- phase 3: pump (source → assembler → stream) -----------------------------------------

    async def pump(self, launched: Launched) -> TurnOutcome:
        """Feed snapshots until agy exits or a deadline passes (the abort is watched outside)."""
        config, process, handover = launched.plan.config, launched.process, launched.handover
        # The turn's clock, which does not count the host's time with tool calls.
        started_at = launched.started_at
        loop = asyncio.get_running_loop()
        exit_task = asyncio.ensure_future(process.wait())
        calls_task: asyncio.Future[list[ToolCall]] | None = None
        last_progress = loop.time()
        try:
            while True:
                if calls_task is not None and calls_task.done():
                    calls, calls_task = calls_task.result(), None
                    if calls:
                        ended, waited = await self._park(calls, exit_task, launched)
                        started_at += waited
                        if ended is not None:
                            return ended
                        last_progress = loop.time()
                if self.opened.tools is not None and calls_task is None:
                    calls_task = asyncio.ensure_future(self.opened.tools.next_calls())
                changed = await handover.poll(process)
                if changed:
                    last_progress = loop.time()
                    await self._feed(changed)
                upgrading = handover.upgrading
                if upgrading is not None and upgrading.done():
                    await handover.take_upgrade(finished=process.returncode is not None)
                    continue  # read the new source at once (its first snapshot)
                source = handover.source
                assert source is not None
                now = loop.time()
                if exit_task.done():
                    await handover.drain(self._feed)
                    return exit_outcome(process, exit_task.result())
                if now - started_at > config.turn_timeout:
                    return await self._deadline(
                        launched,
                        f"agy did not finish within {config.turn_timeout:.0f}s (the turn deadline); "
                        "raise turn_timeout (AGY_TURN_TIMEOUT) for long tasks",
                    )
                if source.deciding or (self.opened.tools is not None and self.opened.tools.running):
                    # Waiting on our own decision hooks, or on a tool the host runs for agy
                    # at once (an executor, a plugin), is not agy hanging.
                    last_progress = now
                if now - last_progress > config.idle_timeout:
                    return await self._deadline(
                        launched,
                        f"agy made no progress for {config.idle_timeout:.0f}s (the idle deadline); "
                        "it may be hung or waiting on a prompt. Raise idle_timeout (AGY_IDLE_TIMEOUT) "
                        "or check agy on its own",
                    )
                wait_task = asyncio.ensure_future(source.wait(1.0))
                waits: set[asyncio.Future[Any]] = {wait_task, exit_task}
                if handover.upgrading is not None:
                    waits.add(handover.upgrading)
                if calls_task is not None:
                    waits.add(calls_task)
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wait_task.cancel()
        finally:
            if not exit_task.done():
                exit_task.cancel()
            if calls_task is not None:
                calls_task.cancel()

    # -- host tools: park the stream on agy's call, resume on the host's results -------------

    async def _park(
        self, calls: list[ToolCall], exit_task: asyncio.Future[int | None], launched: Launched
    ) -> tuple[TurnOutcome | None, float]:
        """End the host's stream with agy's tool calls (`toolUse`) and wait, agy kept running,
        until the host resumes the turn with their results (None), or the wait ends (the turn's
        outcome); and how long the host took (the turn's deadlines do not count it)."""
        self.parking.begin()
        # What agy wrote before it called (the planner's thinking and text) goes first.
        await self._feed(await launched.handover.poll(launched.process))
        await self._read_answering_model()
        events = self._mark(self.assembler.park(calls))
        self.outlet.tell(self._facts(final_message(events)))
        self.outlet.emit(events)
        why, waited = await self.parking.wait(
            self,
            calls,
            exit_task,
            # What the host now holds: the history its next turn starts from if this one ends.
            delivered=events[-1].message if events and isinstance(events[-1], DoneEvent) else None,
            host_tool_timeout=launched.plan.config.host_tool_timeout,
            agy_deadline=launched.agy_deadline,
            print_timeout=launched.print_timeout,
        )
        if not why:
            return None, waited
        if self.opened.tools is not None:
            await self.opened.tools.aclose()  # agy's open calls get an error answer before it stops
        return await self._deadline(launched, why), waited

    @property
    def parked(self) -> bool:
        """True while the turn waits for the host's tool results."""
        return self.parking.parked

    def resume(self, call: HostCall, results: dict[str, ToolResultMessage]) -> bool:
        """Continue the parked turn under the host's new `call` (its context, abort signal and
        stream) with the host's `results` (by call id); the turn's model and options stay.

        Synchronous, on the turn's loop; False when the turn is no longer waiting (the host
        then starts a new turn with those results).
        """
        if not self.parked or self.opened.tools is None:
            return False
        self.parking.answered(self, results)
        self.call = call
        self.outlet.follow(call.stream)
        events = self.assembler.resume(timestamp=int(time.time() * 1000))
        for event in events:
            call.stream.push(event)  # `start` (emit pushes every event but that one)
        self.outlet.emit(events)
        self.opened.tools.answer(results)
        self.parking.go_on()
        return True

    async def end_parked(self, why: str) -> None:
        """End a parked turn that will not be resumed, and wait until it has settled.

        Callable from any loop: the turn is ended on its own."""
        loop = self.loop
        if loop is not None and loop is not asyncio.get_running_loop():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.end_parked(why), loop))
            return
        self.parking.end(why)
        if self.task is not None and self.task is not asyncio.current_task():
            await asyncio.wait({self.task})

    async def _feed(self, steps: list[Step]) -> None:
        """Feed the assembler, first reading (in a worker thread) the old texts of files these
        steps edited, so their diffs need no I/O on the loop (`diffs.GitBaselines`)."""
        prefetch = getattr(self.assembler.baselines, "prefetch", None)
        if prefetch is not None:
            await prefetch(steps)
        self.outlet.emit(self.assembler.feed(steps))

    async def _deadline(self, launched: Launched, message: str) -> TurnOutcome:
        """End agy for `message` (a deadline passed), then read what it wrote."""
        await launched.process.terminate()
        await launched.handover.drain(self._feed)
        return TurnOutcome(ok=False, error=message)

    # -- phase 4: settle (final event first, then the session) -------------------------------

    async def _read_answering_model(self) -> None:
        """The model that answered, as agy recorded it (the asked id may be a base or alias)."""
        if self.ctx is not None and self.ctx.binding is not None:
            answered_by = await read_answering_model(self.ctx.binding, self.assembler.turn_start)
            self.assembler.use_model(answered_by)  # ignores "" (no record names one)

    def _mark(self, events: list[AssistantMessageEvent]) -> list[AssistantMessageEvent]:
        """The final event's message bearing this turn's mark, once the turn is bound."""
        bound = self.ctx is not None and self.ctx.binding is not None
        return mark_events(
            events,
            self.conversation_id if bound else "",
            self.forked_from or (self.planned.lost_conversation if self.planned else ""),
        )

    def _facts(self, final: AssistantMessage | None) -> TurnFacts:
        return TurnFacts(
            conversation_id=self.conversation_id,
            exit_code=None if self.opened.process is None else self.opened.process.returncode,
            model=final.model if final is not None else "",
            source=self.source_name,
            admission_wait=self.opened.admission_wait,
            source_fallbacks=self.opened.handover.fallbacks if self.opened.handover else 0,
        )

    def _deliver(self, events: list[AssistantMessageEvent], outcome: TurnOutcome) -> None:
        self.outlet.deliver(events, outcome, self._facts(final_message(events)))

    async def settle(self, outcome: TurnOutcome, launched: Launched | None) -> None:
        """Deliver the final event, then save the session (off the loop, after the host has it)."""
        if not outcome.aborted:
            await self._read_answering_model()
        events = self._mark(self.assembler.finish(outcome))
        final = final_message(events)
        if self.parking.delivered is not None:
            # Ended while parked: the host's transcript ends with the `toolUse` message, so its
            # next turn (the tool results, late) resumes this conversation.
            final = self.parking.delivered
        records = {}
        if launched is not None:
            records = turn_records(
                launched,
                outcome,
                final=final,
                messages=self.call.context.messages,
                previous=self.planned.conversation_record if self.planned is not None else None,
                turn_start=self.assembler.turn_start,
            )
        saving = SessionSave(self.edges.store, self)
        saving.keep(records)
        self._deliver(events, outcome)
        if records:
            await saving.save(records, self.opened.version_task)

