"""Decode agy's `--output-format stream-json` (and `json`) output into Step snapshots and outcomes.

Owns every shape agy 1.1.8–1.3.3 prints (AGY-FORMATS §2.1–§2.3); sans-I/O, stateful per stream.

Shapes covered, oldest first:
- 1.1.17: a tool's outcome in the update's top-level `output` / `error{type,message}`; `result`
  usage for one fresh turn.
- 1.1.18–1.2.x: outcomes in `tool_info.output` / `tool_info.error{type,message}`; `result` usage
  and duration are the conversation's running totals; denied actions end `CANCELED` (reason on
  stderr), `SUCCESS` with an empty answer and `denied_actions`, or `ERROR` with a full answer;
  `system_message`, `error_message`, `unknown` and `subagent` (`subagent_info`) steps;
  `command_result` events of slash commands; non-JSON lines (notices, errors) between events.
- 1.2.x–1.3.3: `init` at process start, before any input (with `init.model` from 1.3.2);
  `finish` steps (bookkeeping, skipped); a quota refusal's outcome carries `quota`.
- `--output-format json`: one bare `result` object, no `event` key.

Text arrives as deltas. Each step keeps its deltas as a list of chunks and joins them only when a
snapshot is taken, so decoding is linear in the input. With `coalesce=True` a run of deltas of
one step is snapshotted once its text has doubled (past `COALESCE_FROM` characters) or when
something else happens, so even a 20,000-delta answer costs a handful of joins; `flush()` takes
the deferred snapshots when the input pauses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import deque
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import TypeAlias

from agy_provider.agy import streamjson_values as values
from agy_provider.agy.result import AgyResult
from agy_provider.agy.result import read_result
from agy_provider.agy.result import result_outcome
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson_values import stream_json_usage
from agy_provider.agy.streamjson_values import subtract_usage
from agy_provider.errors import DecodeError
from agy_provider.wire.ndjson import NEED_DATA
from agy_provider.wire.ndjson import LineDecoder

__all__ = [
    "COALESCE_FROM",
    "StreamJsonDecoder",
    "StreamJsonResult",
    "decode_stream_json",
    "stream_json_usage",
    "subtract_usage",
]

log = logging.getLogger(__name__)

Item: TypeAlias = Step | TurnOutcome
Skip = Callable[[str], None]

# Below this many characters every delta gets its own snapshot (replay shows text as it streamed,
# and a snapshot costs at most this much copying); above it, a coalescing decoder snapshots a step
# again only once its text has doubled, so the total copying stays linear in the text.
COALESCE_FROM: Final = 8 * 1024
# Non-JSON lines kept as notes for the turn's error message (e.g. "Error: authentication
# required …"): a few short lines are what agy prints; more is noise that must not pile up.
_MAX_NOTES: Final = 4
_MAX_NOTE_CHARS: Final = 500
# Step indices are small non-negative integers in agy; anything outside this is not a step index.
_MAX_INDEX: Final = 2**31 - 1

_KINDS: Mapping[str, StepKind] = {
    "user_input": StepKind.USER,
    "agent_response": StepKind.ASSISTANT,
    "tool": StepKind.TOOL,
    "subagent": StepKind.TOOL,
    "checkpoint": StepKind.CHECKPOINT,
    "system_message": StepKind.SYSTEM,
    "error_message": StepKind.ERROR,
    # 1.3.x marks the end of the agent's loop with a `finish` step (AGY-FORMATS §2.3; its body
    # is unverified): bookkeeping, never the answer and never an error, whatever its state.
    "finish": StepKind.SYSTEM,
}

_STATES: Mapping[str, StepStatus] = {
    "ACTIVE": StepStatus.RUNNING,
    "DONE": StepStatus.DONE,
    "ERROR": StepStatus.ERROR,
    "CANCELED": StepStatus.CANCELED,
    "CANCELLED": StepStatus.CANCELED,
}


@dataclasses.dataclass(frozen=True, slots=True)
class StreamJsonResult:
    """One `result` as agy printed it, for callers that need more than the `TurnOutcome`.

    `total_usage` and `duration_seconds` are agy's running totals for the conversation (1.1.18+);
    `turn_usage` is this turn's share. Persist `total_usage` to pass as `previous_total` when the
    next process resumes the conversation.
    """

    status: str
    response: str
    error: str
    num_turns: int | None
    duration_seconds: float | None
    total_usage: StepUsage | None
    turn_usage: StepUsage | None
    denied_actions: tuple[str, ...] = ()
    command: str = ""


@dataclasses.dataclass(slots=True)
class _StepState:
    """One step's accumulated state; its text as chunks, joined only when snapshotted."""

    step: Step
    agent_type: str
    chunks: list[str] = dataclasses.field(default_factory=list)
    length: int = 0
    # Index of the first U+FFFD in the text: from there the text is held back until the result
    # can heal it (agy 1.1.12–1.1.15 broke multibyte characters at delta boundaries).
    hold_from: int | None = None
    shown: int = 0  # characters of text in the last snapshot given out
    deferred: bool = False  # a delta arrived that no snapshot has carried yet

    def visible(self) -> int:
        return self.length if self.hold_from is None else self.hold_from

    def append(self, delta: str, *, hold: bool = False) -> None:
        if hold and self.hold_from is None:
            at = delta.find(values.REPLACEMENT)
            if at >= 0:
                self.hold_from = self.length + at
        self.chunks.append(delta)
        self.length += len(delta)

    def joined(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


class StreamJsonDecoder:
    """Feed agy's stream-json lines (bytes, lines or parsed events); get Steps and outcomes.

    Every method returns a list of items in order: `Step` snapshots (the newest state of one
    step, text accumulated) and one `TurnOutcome` per `result`. Only `DecodeError` is raised,
    and only by `feed`, `feed_event` and `feed_line` for a line or event that is not one
    (skippable: go on with the next); `receive` and `end_of_input` skip such lines themselves,
    reporting each through `on_skip`.

    Usage: `result.usage` is a running total from agy 1.1.18 on. The turn's usage is
    result(N) − result(N−1) when the previous total is known (an earlier result of this stream,
    or `previous_total` from the caller); else the result itself for a fresh conversation
    (`num_turns` 1); else — a resumed process — the sum of the turn's DONE `agent_response`
    usages. `last_result` keeps the raw totals.

    Attributes: `conversation_id` (from `init`, the only place a fresh run states it, else from
    any event), `permission_mode`, `model` (`init.model`: 1.3.2+ always, 1.1.18+ with
    `--model`), `last_result`, `skipped` (count of skipped lines) and `chars_joined`
    (characters copied to build snapshot texts: the decoder's work).
    """

    def __init__(
        self,
        *,
        previous_total: StepUsage | None = None,
        coalesce: bool = False,
        on_skip: Skip | None = None,
    ) -> None:
        self.conversation_id = ""
        self.permission_mode = ""
        self.model = ""
        self.last_result: StreamJsonResult | None = None
        self.skipped = 0
        self.chars_joined = 0
        self._coalesce = coalesce
        self._on_skip = on_skip or (lambda reason: log.warning("stream-json: %s", reason))
        self._previous_total = previous_total
        self._lines = LineDecoder()
        self._states: dict[int, _StepState] = {}
        self._notes: deque[str] = deque(maxlen=_MAX_NOTES)
        self._stderr: deque[str] = deque(maxlen=_MAX_NOTES)
        self._new_turn()

    def _new_turn(self) -> None:
        self._turn: list[int] = []  # step indices seen this turn, first-seen order
        self._agent_usage: StepUsage | None = None
        self._denied: dict[int, str] = {}
        self._held: int | None = None  # the agent step whose text is held back
        self._command = ""
        self._notes.clear()

    # -- caller-supplied context -------------------------------------------------------------

    def set_previous_total(self, usage: StepUsage | None) -> None:
        """The conversation's running total before this process's first turn (a resumed run)."""
        self._previous_total = usage

    def note_stderr(self, text: str) -> None:
        """Lines agy printed on stderr; a `CANCELED` result names the denial they report."""
        for line in text.splitlines():
            line = values.clean(line.strip())
            if line:
                self._stderr.append(line[:_MAX_NOTE_CHARS])

    # -- input -------------------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Item]:
        """Feed raw stdout bytes; returns the items of every complete line. Bad lines are skipped.

        Only `\\n` ends a line. Raises `FramingError` (a `DecodeError`) only when a line exceeds
        the framer's bound; the stream is then poisoned.
        """
        self._lines.feed(data)
        items: list[Item] = []
        while (line := self._lines.next_line()) is not NEED_DATA:
            self._take(line, items)
        return items

    def end_of_input(self) -> list[Item]:
        """The input ended: the last unterminated line, then every deferred or held snapshot."""
        items: list[Item] = []
        tail = self._lines.end_of_input()
        if tail is not None:
            self._take(tail, items)
        for state in self._states.values():
            if state.hold_from is not None:
                state.hold_from = None  # no result came to heal it: show the text as it streamed
                state.deferred = True
        self._held = None
        items.extend(self.flush())
        return items

    def feed_line(self, line: str | bytes) -> list[Item]:
        """Feed one line (no `\\n` needed). Raises `DecodeError` when it is not a JSON object."""
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            self._note(line)
            raise DecodeError(f"not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise DecodeError(f"JSON {type(value).__name__}, not an event object")
        return self.feed_event(value)

    def feed(self, event: Mapping[str, Any]) -> Step | TurnOutcome | None:
        """One parsed event → the item it is about (the Step, or the TurnOutcome of a result).

        The simple form of `feed_event`, for callers that take one item per event; a result's
        reconciled text (a snapshot before the outcome) is dropped here, so prefer `feed_event`.
        """
        items = self.feed_event(event)
        return items[-1] if items else None

    def feed_event(self, event: Any) -> list[Item]:
        """One parsed event (a dict) → the items it produces. Raises `DecodeError` if not an event."""
        if not isinstance(event, Mapping):
            raise DecodeError(f"JSON {type(event).__name__}, not an event object")
        items: list[Item] = []
        kind = event.get("event")
        if kind == "step_update":
            body = event.get("step_update")
            if not isinstance(body, Mapping):
                raise DecodeError("step_update without an object body")
            self._update(body, items)
        elif kind == "result":
            body = event.get("result")
            if not isinstance(body, Mapping):
                raise DecodeError("result without an object body")
            self._result(body, items)
        elif kind == "init":
            self.conversation_id = values.text(event.get("conversation_id")) or self.conversation_id
            init = event.get("init")
            if isinstance(init, Mapping):
                self.permission_mode = values.text(init.get("permission_mode"))
                self.model = values.text(init.get("model"))[:200] or self.model
        elif kind == "command_result":
            self._command_result(event, items)
        elif kind == "user":
            pass  # our own input, echoed back by --input-format stream-json
        elif kind is None and "status" in event and ("response" in event or "num_turns" in event):
            self._result(event, items)  # --output-format json: one bare result object
        else:
            raise DecodeError(f"unknown stream-json event {values.text(kind)[:80]!r}")
        return items

    def flush(self) -> list[Step]:
        """Snapshots that coalescing deferred; call when the input pauses (live) or ends."""
        return [self._snapshot(s) for s in self._pending_states()]

    # -- lines -------------------------------------------------------------------------------

    def _take(self, line: bytes, items: list[Item]) -> None:
        try:
            items.extend(self.feed_line(line))
        except DecodeError as exc:
            self.skipped += 1
            self._on_skip(f"line {self._lines.line_number}: skipped, {exc}")

    def _note(self, line: str | bytes) -> None:
        """Keep a non-JSON line that reads like agy's own error, for the turn's message."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = values.clean(line.strip())
        if line.lower().startswith(("error:", "fatal:")):
            self._notes.append(line[:_MAX_NOTE_CHARS])

    # -- step updates ------------------------------------------------------------------------

    def _update(self, body: Mapping[str, Any], items: list[Item]) -> None:
        raw_index = body.get("step_index")
        if isinstance(raw_index, bool) or not isinstance(raw_index, int):
            raise DecodeError("step_update without a numeric step_index")
        if not 0 <= raw_index <= _MAX_INDEX:
            # Never format the number itself: one of over 4,300 digits cannot become a string.
            sign = "negative" if raw_index < 0 else f"above {_MAX_INDEX}"
            raise DecodeError(f"step_update with a step_index out of range ({sign})")
        index = raw_index
        agent_type = values.text(body.get("step_type"))
        kind = _KINDS.get(agent_type, StepKind.UNKNOWN)
        status = _STATES.get(values.text(body.get("state")).upper(), StepStatus.UNSPECIFIED)
        if kind is StepKind.ASSISTANT and status is StepStatus.RUNNING:
            status = StepStatus.GENERATING
        state = self._states.get(index)
        first = state is None
        if state is None:
            state = _StepState(Step(index=index, kind=kind, status=status), agent_type)
            self._states[index] = state
            self._turn.append(index)
        delta = body.get("text_delta")
        delta = values.clean(delta) if isinstance(delta, str) else ""
        if kind in (StepKind.ASSISTANT, StepKind.TOOL):
            self._release_other_hold(index)
        previous = state.step
        usage = stream_json_usage(body.get("usage"))
        if (
            usage is not None
            and kind is StepKind.ASSISTANT
            and status is StepStatus.DONE
            and (previous.usage is None or previous.status is not StepStatus.DONE)
        ):
            self._agent_usage = usage if self._agent_usage is None else self._agent_usage + usage
        tool, result, tool_error = values.tool_update(body, agent_type, status, previous)
        error = tool_error or values.error_message(body.get("error"))
        step = dataclasses.replace(
            previous,
            kind=kind,
            status=status,
            tool=tool,
            result=result,
            usage=usage or previous.usage,
            error=error or previous.error,
            conversation_id=values.text(body.get("conversation_id"))
            or previous.conversation_id
            or self.conversation_id,
        )
        if tool is not None and status is StepStatus.ERROR and values.is_denial(error):
            self._denied[index] = values.describe_denial(tool, error)
        if delta:
            state.append(delta, hold=kind is StepKind.ASSISTANT)
            if state.hold_from is not None and kind is StepKind.ASSISTANT:
                self._held = index
        only_text = (
            not first
            and delta != ""
            and step.status is previous.status
            and step.kind is previous.kind
            and step.error == previous.error
            and usage is None
        )
        state.step = step
        if only_text and self._defer(state):
            return
        if not first and not delta and step == previous and not state.deferred:
            return  # a repeat with nothing new (the subagent DONE that repeats ACTIVE)
        items.extend(self._snapshot(s) for s in self._pending_states(exclude=index))
        items.append(self._snapshot(state))

    def _defer(self, state: _StepState) -> bool:
        """Coalescing: hold this text-only snapshot back while the text has not yet doubled."""
        visible = state.visible()
        if visible == state.shown:
            return True  # all the growth is held back (after a U+FFFD): nothing new to show
        if not self._coalesce or visible <= COALESCE_FROM or visible - state.shown >= state.shown:
            return False
        state.deferred = True
        return True

    def _pending_states(self, exclude: int | None = None) -> list[_StepState]:
        return [
            s
            for i, s in sorted(self._states.items())
            if s.deferred and i != exclude and s.visible() > s.shown
        ]

    def _answer_state(self, agent_type: str) -> _StepState:
        """A new answer step after every step seen (a command's result, a bare response)."""
        index = max(self._states, default=-1) + 1
        step = Step(
            index=index,
            kind=StepKind.ASSISTANT,
            status=StepStatus.DONE,
            conversation_id=self.conversation_id,
        )
        state = self._states[index] = _StepState(step, agent_type)
        return state

    def _snapshot(self, state: _StepState) -> Step:
        state.deferred = False
        step = state.step
        if step.kind is StepKind.ASSISTANT or state.chunks:
            visible = state.visible()
            if visible != len(step.text):
                text = state.joined()
                self.chars_joined += visible
                step = dataclasses.replace(
                    step, text=text[:visible] if visible < len(text) else text
                )
            state.shown = visible
            state.step = step
        return step

    def _release_other_hold(self, index: int) -> None:
        """Another step now renders content: a held text can no longer be healed in place."""
        if self._held is not None and self._held != index:
            held = self._states[self._held]
            held.hold_from = None
            held.deferred = True
            self._held = None

    def _release(self, index: int, items: list[Item]) -> None:
        state = self._states[index]
        state.hold_from = None
        state.deferred = True
        self._held = None
        items.append(self._snapshot(state))

    # -- results -----------------------------------------------------------------------------

    def _command_result(self, event: Mapping[str, Any], items: list[Item]) -> None:
        """A slash command's answer (`/usage`, `/model`): its data is the turn's answer text."""
        body = event.get("command_result")
        body = body if isinstance(body, Mapping) else event
        command = body.get("command")
        command = command if isinstance(command, Mapping) else body
        name = values.text(command.get("name")) or "command"
        self._command = name
        data = command.get("data")
        text = values.text(data) if not isinstance(data, dict | list) else ""
        if isinstance(data, dict | list):
            text = json.dumps(values.plain(data), ensure_ascii=False, indent=2)
        state = self._answer_state("command_result")
        state.append(text or f"/{name.lstrip('/')}")
        self._turn.append(state.step.index)
        items.append(self._snapshot(state))

    def _result(self, body: Mapping[str, Any], items: list[Item]) -> None:
        result = read_result(body)
        self.conversation_id = self.conversation_id or result.conversation_id
        items.extend(self.flush())
        self._reconcile(result.response, items)
        total, turns = result.total_usage, result.num_turns
        if self._command == "" and isinstance(body.get("command"), Mapping):
            self._command_result({"command": body["command"]}, items)
        turn_usage = self._turn_usage(total, turns)
        if total is not None and turns != 0:  # a slash command's zero usage is no running total
            self._previous_total = total
        outcome = self._outcome(result)
        self.last_result = StreamJsonResult(
            status=result.status,
            response=result.response,
            error=outcome.error,
            num_turns=turns,
            duration_seconds=result.duration_seconds,
            total_usage=total,
            turn_usage=turn_usage,
            denied_actions=result.denied_actions,
            command=self._command,
        )
        items.append(dataclasses.replace(outcome, usage=turn_usage))
        self._new_turn()

    def _turn_usage(self, total: StepUsage | None, turns: int | None) -> StepUsage | None:
        if total is None:
            return self._agent_usage
        if self._previous_total is not None:
            share = subtract_usage(total, self._previous_total)
            if share is not None:
                return share
            # The total shrank: not the running total we know (another conversation, an older
            # agy). The turn's own model calls are the honest answer.
            return self._agent_usage or total
        if turns is None or turns <= 1:
            return total  # a fresh conversation's (or agy 1.1.17's) result is the turn
        return self._agent_usage  # resumed process, earlier total unknown

    def _outcome(self, result: AgyResult) -> TurnOutcome:
        """The turn's outcome by its `result` (`result.py`'s words), with what this stream adds:
        the denials its steps showed, whether it answered, agy's stderr and error lines."""
        answered = bool(result.response) or any(
            self._states[i].length
            for i in self._turn
            if self._states[i].agent_type == "agent_response"
        )
        said = [line for line in self._stderr if values.is_denial(line)] or list(self._stderr)[-1:]
        return result_outcome(
            result,
            step_denials=self._denied.values(),
            answered=answered,
            reason="; ".join(said),
            said=list(self._notes),
        )

    def _reconcile(self, response: str, items: list[Item]) -> None:
        """Make the streamed answer agree with `result.response`, never retracting what was shown.

        The last agent step takes the response when the response extends what that step (or the
        turn's agent steps together) showed; held-back text after a U+FFFD is healed only when the
        response matches it outside the broken characters, else shown as it streamed.
        """
        agents = [i for i in self._turn if self._states[i].agent_type == "agent_response"]
        if not response:
            if self._held is not None:
                self._release(self._held, items)
            return
        if not agents:
            state = self._answer_state("agent_response")
            state.append(response)
            state.hold_from = None
            self._turn.append(state.step.index)
            items.append(self._snapshot(state))
            return
        last = self._states[agents[-1]]
        shown = [self._states[i].joined()[: self._states[i].shown] for i in agents]
        earlier, own = "".join(shown[:-1]), shown[-1]
        # Where the last step's text starts in the response: the response is that step's text,
        # or (some builds) every agent step of the turn in a row.
        if earlier and response.startswith(earlier + own):
            tail = response[len(earlier) + len(own) :]
        elif response.startswith(own):
            tail = response[len(own) :]
        else:
            tail = None
        if last.hold_from is not None:
            held = last.joined()[last.shown :]
            if tail is not None and values.heals(held, tail):
                self._replace_text(last, own + tail, items)
            else:
                self._release(agents[-1], items)
            return
        if not tail:
            if tail is None:
                log.debug("stream-json: result.response differs from the streamed text; kept it")
            return
        if response in "".join(shown):
            return  # already shown, by an earlier step
        self._replace_text(last, own + tail, items)

    def _replace_text(self, state: _StepState, text: str, items: list[Item]) -> None:
        state.chunks[:] = [text]
        state.length = len(text)
        state.hold_from = None
        self._held = None
        items.append(self._snapshot(state))


def decode_stream_json(
    chunks: Iterable[bytes | str],
    *,
    on_skip: Skip | None = None,
    previous_total: StepUsage | None = None,
    decoder: StreamJsonDecoder | None = None,
) -> Iterator[Item]:
    """A whole capture (file chunks, bytes or text) → its items, coalesced; bad lines skipped.

    Only `\\n` ends a line (U+2028 inside a delta is text). Memory and work stay linear in the
    input: a run of deltas is joined once its text has doubled. Raises only `FramingError`, for a
    line longer than the framer's bound.
    """
    decoder = decoder or StreamJsonDecoder(
        coalesce=True, on_skip=on_skip, previous_total=previous_total
    )
    for chunk in chunks:
        data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
        yield from decoder.receive(data)
    yield from decoder.end_of_input()
