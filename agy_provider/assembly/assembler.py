"""The assembler: Step snapshots in, pi AssistantMessageEvents out. Pure — no I/O, no clock.

The only place Steps become events, so every source (sqlite, rpc, stream-json, replay) agrees.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Literal

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.assembly.diffs import BaselineProvider
from agy_provider.assembly.diffs import EditLedger
from agy_provider.assembly.outcome import decide_ending
from agy_provider.assembly.tool_runs import render_and_run
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingEndEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.events import ToolCallDeltaEvent
from agy_provider.pi.events import ToolCallEndEvent
from agy_provider.pi.events import ToolCallStartEvent
from agy_provider.pi.tool_run import ToolRun
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import Usage

__all__ = ["API", "PROVIDER", "StepAssembler", "usage_to_pi"]

log = logging.getLogger(__name__)

API = "agy"
PROVIDER = "agy"

_BlockKind = Literal["text", "thinking", "toolCall"]


@dataclasses.dataclass(slots=True)
class _Block:
    """One content block. Its text is `source[start:]`: `source` is its step part's whole text
    as last emitted, `start` where the block began in it (0 unless a message was parked and
    resumed mid-step). Holding the step's own string, not a copy grown by `+=`, keeps a delta's
    cost to the delta: a 1 MB answer is never copied once per delta."""

    kind: _BlockKind
    key: tuple[int, str]
    source: str = ""
    start: int = 0
    call: ToolCall | None = None  # a toolCall block's call
    run: ToolRun | None = None  # a tool run's value, as far as it is known

    @property
    def text(self) -> str:
        return self.source[self.start :] if self.start else self.source


@dataclasses.dataclass(slots=True)
class _Emitted:
    """What one step index has contributed so far, per part ("thinking", "text", "tool")."""

    parts: dict[str, str] = dataclasses.field(default_factory=dict)


def usage_to_pi(usage: StepUsage) -> Usage:
    """Our StepUsage in pi's terms; costs stay zero (agy runs on a subscription)."""
    return Usage(
        input=usage.input,
        output=usage.output,
        cache_read=usage.cache_read,
        cache_write=usage.cache_write,
        total_tokens=usage.total,
    )


class StepAssembler:
    """Feed Step snapshots of one turn; get the pi events they add. Call `finish` once at the end.

    The turn starts at the first USER step at or after `min_index` — or, when `turn_start` is
    given, right after that index (-1: every step is in the turn) — and ends before the next USER
    step. Steps outside it, and history steps, never start or join it. Per step index the
    assembler remembers what it emitted and emits only growth; re-fed or shorter snapshots emit
    nothing. With `track_partial=False` events carry an empty `partial` (cheaper; for
    consumers that drop it). `baselines` answers an edited file's old text for its diff; it
    must answer at once (see `diffs.GitBaselines`): without it edits are diffed from the call.

    A turn whose agy calls a tool the host runs (the MCP bridge) is streamed as several pi
    messages: `park(calls)` ends the current one with those `toolCall`s and stop reason
    `toolUse`; `resume()` starts the next, which takes the turn on from where it stopped (each
    step's growth is still emitted once; each step's usage is counted in one message only).
    The steps of tools the host runs are not rendered (`hide_tools`): the host's transcript
    shows the call and its result.
    """

    def __init__(
        self,
        *,
        model: str,
        api: str = API,
        provider: str = PROVIDER,
        min_index: int = 0,
        turn_start: int | None = None,
        timestamp: int = 0,
        track_partial: bool = True,
        baselines: BaselineProvider | None = None,
    ) -> None:
        self._model = model
        self._api = api
        self._provider = provider
        self._min_index = min_index
        self._timestamp = timestamp
        self._turn_start: int | None = turn_start
        # The turn's newest step so far, and whether agy cancelled or interrupted it.
        self._last_index = -1
        self._last_cancelled = False
        self._turn_end: int | None = None
        self._blocks: list[_Block] = []
        self._open: int | None = None
        self._emitted: dict[int, _Emitted] = {}
        self._usage: dict[int, StepUsage] = {}
        self._failure: tuple[int, str] | None = None
        self._last_answer = -1
        self._stop_length = False
        self._started = False
        self._finished = False
        self._partial: AssistantMessage | None = None
        # Without partials every event carries one empty message: for consumers (replay's JSON
        # lines) that never read `partial`, this skips rebuilding the message per delta.
        self._track_partial = track_partial
        self.title = ""
        # Where edits' old texts come from (diffs.GitBaselines on the live path and in replay);
        # the ledger carries each file's text from one edit of the turn to the next.
        self.baselines = baselines
        self._edits = EditLedger(baselines)
        # Host-run tools (their steps are not rendered), steps whose usage an earlier message
        # of the turn reported, and whether the current message ended with tool calls.
        self._hidden_tools: frozenset[str] = frozenset()
        self._reported: set[int] = set()
        self._parked = False

    # -- public -----------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def turn_start(self) -> int | None:
        """The index of the turn's USER step, once seen."""
        return self._turn_start

    def use_model(self, model: str) -> None:
        """Report `model` (the slug that answered, from agy's records) instead of the one asked."""
        if model:
            self._model = model

    def begin_after(self, min_index: int) -> None:
        """Take the turn from the first USER step at or after `min_index` (before any feed)."""
        self._min_index = min_index

    @property
    def parked(self) -> bool:
        """True between `park` and `resume`: the current message ended with tool calls."""
        return self._parked

    def hide_tools(self, names: Collection[str]) -> None:
        """Do not render the steps of these tools (as agy names them): the host runs them."""
        self._hidden_tools = frozenset(names)

    def park(self, calls: Sequence[ToolCall]) -> list[AssistantMessageEvent]:
        """End the current message with `calls` (toolcall events, then `done` with `toolUse`)."""
        if self._finished or self._parked:
            return []
        events = self.start()
        self._close(events)
        for call in calls:
            self._blocks.append(_Block(kind="toolCall", key=(-1, call.id), call=call))
            index = len(self._blocks) - 1
            self._content_changed()
            events.append(ToolCallStartEvent(content_index=index, partial=self._snapshot()))
            arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
            events.append(
                ToolCallDeltaEvent(content_index=index, delta=arguments, partial=self._snapshot())
            )
            events.append(
                ToolCallEndEvent(content_index=index, tool_call=call, partial=self._snapshot())
            )
        message = AssistantMessage(
            content=self._content(),
            api=self._api,
            provider=self._provider,
            model=self._model,
            usage=usage_to_pi(self._usage_so_far()),
            stop_reason="toolUse",
            timestamp=self._timestamp,
        )
        events.append(DoneEvent(reason="toolUse", message=message))
        self._reported.update(self._usage)
        self._usage.clear()
        self._parked = True
        return events

    def resume(self, timestamp: int | None = None) -> list[AssistantMessageEvent]:
        """Start the turn's next message (after `park`): its `start` event."""
        if not self._parked:
            return []
        self._parked = False
        self._blocks = []
        self._open = None
        self._started = False
        self._stop_length = False
        if timestamp is not None:
            self._timestamp = timestamp
        self._content_changed()
        self._partial = None
        return self.start()

    def has_failure(self) -> bool:
        """True when an error step or failed model call is, so far, the turn's last word."""
        return self._failure is not None and self._failure[0] > self._last_answer

    def has_text(self) -> bool:
        """True once the model's answer text (not just thinking) has been streamed."""
        return any(block.kind == "text" for block in self._blocks)

    def start(self) -> list[AssistantMessageEvent]:
        """The `start` event, once."""
        if self._started:
            return []
        self._started = True
        return [StartEvent(partial=self._snapshot())]

    def feed(self, steps: Iterable[Step]) -> list[AssistantMessageEvent]:
        """Take the newest snapshots of some steps (any order, repeats welcome)."""
        if self._finished:
            return []
        events = self.start()
        for step in sorted(steps, key=lambda s: s.index):
            self._take(step, events)
        return events

    def finish(self, outcome: TurnOutcome | None = None) -> list[AssistantMessageEvent]:
        """Close the open block and end the turn with `done`, or `error` when it failed."""
        if self._finished:
            return []
        events = self.start()
        self._close(events)
        self._finished = True
        outcome = outcome or TurnOutcome()
        usage = outcome.usage
        if usage is None:
            usage = self._usage_so_far()
        failure = self._failure[1] if self.has_failure() and self._failure is not None else None
        ending = decide_ending(
            outcome,
            failure=failure,
            answered=self.has_text(),
            truncated=self._stop_length,
            cancelled=self._last_cancelled,
        )
        failed = ending.reason in ("error", "aborted")
        message = AssistantMessage(
            content=self._content(),
            api=self._api,
            provider=self._provider,
            model=self._model,
            usage=usage_to_pi(usage),
            stop_reason=ending.reason,
            error_message=ending.error if failed else None,
            timestamp=self._timestamp,
        )
        if ending.reason == "error" or ending.reason == "aborted":
            events.append(ErrorEvent(reason=ending.reason, error=message))
        else:
            events.append(DoneEvent(reason=ending.reason, message=message))
        return events

    def _usage_so_far(self) -> StepUsage:
        usage = StepUsage()
        for part in self._usage.values():
            usage = usage + part
        return usage

    # -- steps ------------------------------------------------------------------------------

    def _in_turn(self, step: Step) -> bool:
        if step.kind is StepKind.HISTORY:
            return False
        if step.kind is StepKind.USER:
            if self._turn_start is None and step.index >= self._min_index:
                self._turn_start = step.index
            elif (
                self._turn_start is not None
                and step.index > self._turn_start
                and (self._turn_end is None or step.index < self._turn_end)
            ):
                self._turn_end = step.index
            return False
        if self._turn_start is None or step.index <= self._turn_start:
            return False
        return self._turn_end is None or step.index < self._turn_end

    def _take(self, step: Step, events: list[AssistantMessageEvent]) -> None:
        if not self._in_turn(step):
            return
        if step.usage is not None and step.index not in self._reported:
            self._usage[step.index] = step.usage
        if step.index >= self._last_index:
            self._last_index = step.index
            self._last_cancelled = step.status in (StepStatus.CANCELED, StepStatus.INTERRUPTED)
        kind = step.kind
        if kind is StepKind.ASSISTANT:
            self._grow(step.index, "thinking", "thinking", step.thinking, events)
            self._grow(step.index, "text", "text", step.text, events)
            if step.status is StepStatus.ERROR:
                self._fail(step.index, step.error or "agy's model call failed.")
            elif step.text or step.thinking or step.requested_tool_calls:
                self._answered(step.index)
                self._stop_length = step.stop_reason == "max_tokens"
        elif kind is StepKind.TOOL:
            if step.tool is not None and step.tool.name in self._hidden_tools:
                return
            rendered = render_and_run(step, self._edits)
            if rendered is not None:
                self._grow(step.index, "tool", "thinking", rendered[0], events, run=rendered[1])
        elif kind is StepKind.ERROR:
            self._fail(step.index, step.error or "agy reported an error.")
        elif kind is StepKind.CHECKPOINT:
            if step.title:
                self.title = step.title
        elif kind is StepKind.UNKNOWN and step.index not in self._emitted:
            self._emitted[step.index] = _Emitted()
            log.debug("step %d: type %d is not one we render; skipped", step.index, step.step_type)

    def _answered(self, index: int) -> None:
        self._last_answer = max(self._last_answer, index)

    def _fail(self, index: int, message: str) -> None:
        if self._failure is None or index >= self._failure[0]:
            self._failure = (index, message)

    # -- blocks -----------------------------------------------------------------------------

    def _grow(
        self,
        index: int,
        part: str,
        kind: _BlockKind,
        text: str,
        events: list[AssistantMessageEvent],
        *,
        run: ToolRun | None = None,
    ) -> None:
        emitted = self._emitted.setdefault(index, _Emitted())
        before = emitted.parts.get(part, "")
        if len(text) <= len(before):
            return  # nothing new, or a shorter rewrite: never retract what was emitted
        # The whole old text is compared (a memcmp: a rewrite anywhere in it is caught), but
        # only the delta is copied.
        if not text.startswith(before):
            # A rewrite we cannot retract: keep what was streamed, emit nothing that would not
            # follow from it. Growth that extends the streamed text is still taken later.
            log.warning("step %d: %s was rewritten; keeping what was already streamed", index, part)
            return
        delta = text[len(before) :]
        emitted.parts[part] = text
        key = (index, part)
        if self._open is None or self._blocks[self._open].key != key:
            self._close(events)
            self._blocks.append(_Block(kind=kind, key=key, source=before, start=len(before)))
            self._open = len(self._blocks) - 1
            self._content_changed()
            self._blocks[self._open].run = run
            if kind == "text":
                events.append(TextStartEvent(content_index=self._open, partial=self._snapshot()))
            else:
                events.append(
                    ThinkingStartEvent(
                        content_index=self._open, partial=self._snapshot(), tool_run=run
                    )
                )
        block = self._blocks[self._open]
        block.source = text
        block.run = run
        self._content_changed()
        partial = self._snapshot()
        if kind == "text":
            events.append(TextDeltaEvent(content_index=self._open, delta=delta, partial=partial))
        else:
            events.append(
                ThinkingDeltaEvent(
                    content_index=self._open, delta=delta, partial=partial, tool_run=run
                )
            )

    def _close(self, events: list[AssistantMessageEvent]) -> None:
        if self._open is None:
            return
        block = self._blocks[self._open]
        index, partial = self._open, self._snapshot()
        if block.kind == "text":
            events.append(TextEndEvent(content_index=index, content=block.text, partial=partial))
        else:
            events.append(
                ThinkingEndEvent(
                    content_index=index, content=block.text, partial=partial, tool_run=block.run
                )
            )
        self._open = None

    def _content(self) -> list[TextContent | ThinkingContent | ToolCall]:
        content: list[TextContent | ThinkingContent | ToolCall] = []
        for b in self._blocks:
            if b.call is not None:
                content.append(b.call)
            elif b.kind == "text":
                content.append(TextContent(text=b.text))
            else:
                content.append(ThinkingContent(thinking=b.text, tool_run=b.run))
        return content

    def _snapshot(self) -> AssistantMessage:
        if self._partial is None:
            self._partial = AssistantMessage(
                content=self._content() if self._track_partial else (),
                api=self._api,
                provider=self._provider,
                model=self._model,
                stop_reason="stop",
                timestamp=self._timestamp,
            )
        return self._partial

    def _content_changed(self) -> None:
        if self._track_partial:
            self._partial = None
