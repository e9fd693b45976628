"""Offline replay: a saved conversation database, RPC step capture or stream-json capture → turns of events.

Detects the format from the content, decodes with the same decoders and assembler live turns use.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agy_provider.agy.database import (
    iter_generator_rows,
    iter_step_rows,
    open_conversation_db,
    read_conversation_id,
)
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step, StepKind, TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.assembler import StepAssembler
from agy_provider.errors import DatabaseError, DecodeError, UsageError
from agy_provider.types import AssistantMessage, AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.wire.protowire import Message

__all__ = [
    "DEFAULT_MODEL",
    "Recording",
    "ReplayedTurn",
    "detect_format",
    "load_recording",
    "replay",
    "select_turns",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "agy"
_SQLITE_MAGIC = b"SQLite format 3\x00"

Warn = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class _TurnInput:
    """One turn's inputs: its user step (if any), the snapshots in feed order, how it ended."""

    user: Step | None
    batches: Sequence[Sequence[Step]]
    outcome: TurnOutcome | None = None
    model: str = DEFAULT_MODEL


@dataclasses.dataclass(frozen=True, slots=True)
class Recording:
    """A decoded file: its format, every step (newest snapshot per index), and its turns."""

    format: str
    path: str
    steps: Sequence[Step]
    turns: Sequence[_TurnInput]
    conversation_id: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayedTurn:
    """One replayed turn: its 1-based number, the user's text, its steps and pi events."""

    number: int
    user_text: str
    steps: Sequence[Step]
    events: Sequence[AssistantMessageEvent]
    title: str = ""

    @property
    def message(self) -> AssistantMessage:
        last = self.events[-1]
        if isinstance(last, DoneEvent):
            return last.message
        assert isinstance(last, ErrorEvent)
        return last.error


def detect_format(path: str) -> str:
    """`sqlite`, `rpc` or `stream-json`, from the content. Raises `UsageError` otherwise."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    text = head.lstrip()
    if text.startswith(b"[") or (text.startswith(b"{") and b'"event"' not in text.split(b"\n")[0]):
        return "rpc"
    if text.startswith(b"{"):
        return "stream-json"
    raise UsageError(
        f"{path} is not an agy conversation database, RPC step capture or stream-json capture"
    )


def load_recording(path: str | os.PathLike[str], *, warn: Warn | None = None) -> Recording:
    """Decode a file into steps and turns; skipped rows and lines are reported through `warn`."""
    path = os.fspath(path)
    warn = warn or (lambda text: log.warning("%s", text))
    fmt = detect_format(path)
    if fmt == "sqlite":
        return _load_sqlite(path, warn)
    if fmt == "rpc":
        return _load_rpc(path, warn)
    return _load_stream_json(path, warn)


def select_turns(count: int, turn: str) -> range:
    """`last`, `all` or a 1-based number -> the indices of the turns to replay."""
    if count == 0:
        return range(0)
    if turn == "last":
        return range(count - 1, count)
    if turn == "all":
        return range(count)
    try:
        number = int(turn)
    except ValueError as exc:
        raise UsageError(f"--turn takes last, all or a number, not {turn!r}") from exc
    if not 1 <= number <= count:
        raise UsageError(f"turn {number} does not exist: the recording has {count} turn(s)")
    return range(number - 1, number)


def replay(
    recording: Recording, turn: str = "last", *, partials: bool = True
) -> Iterator[ReplayedTurn]:
    """Assemble the selected turns into pi events, exactly as a live turn would have.

    `partials=False` leaves each event's `partial` empty (faster, for output that drops it).
    """
    for position in select_turns(len(recording.turns), turn):
        inputs = recording.turns[position]
        start = inputs.user.index if inputs.user is not None else -1
        assembler = StepAssembler(
            model=inputs.model,
            turn_start=start,
            timestamp=inputs.user.created_at_ms if inputs.user is not None else 0,
            track_partial=partials,
        )
        events: list[AssistantMessageEvent] = assembler.start()
        steps: dict[int, Step] = {}
        for batch in inputs.batches:
            events.extend(assembler.feed(batch))
            steps.update((s.index, s) for s in batch)
        events.extend(assembler.finish(inputs.outcome))
        ordered = [steps[i] for i in sorted(steps)]
        if inputs.user is not None:
            ordered.insert(0, inputs.user)
        yield ReplayedTurn(
            number=position + 1,
            user_text=inputs.user.text if inputs.user is not None else "",
            steps=ordered,
            events=events,
            title=assembler.title,
        )


# -- loaders ------------------------------------------------------------------------------


def _split_turns(
    steps: Sequence[Step], models: Callable[[Sequence[Step]], str]
) -> list[_TurnInput]:
    """One turn per USER step (history never starts one); no USER step at all -> one turn."""
    users = [i for i, s in enumerate(steps) if s.kind is StepKind.USER]
    if not users:
        return [_TurnInput(user=None, batches=[steps], model=models(steps))] if steps else []
    turns = []
    for n, at in enumerate(users):
        end = users[n + 1] if n + 1 < len(users) else len(steps)
        body = steps[at + 1 : end]
        turns.append(_TurnInput(user=steps[at], batches=[body], model=models(body)))
    return turns


def _load_sqlite(path: str, warn: Warn) -> Recording:
    try:
        conn = open_conversation_db(path, snapshot=True)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from exc
    try:
        steps: list[Step] = []
        for row in iter_step_rows(conn, path=path):
            try:
                steps.append(
                    decode_step_row(
                        row.index,
                        row.step_type,
                        row.status,
                        row.payload,
                        metadata=row.metadata,
                        error_details=row.error_details,
                    )
                )
            except DecodeError as exc:
                warn(f"step {row.index}: skipped, {exc}")
        slugs = _generator_slugs(iter_generator_rows(conn, path=path), warn)
        conversation_id = read_conversation_id(conn)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        conn.close()

    def model_of(body: Sequence[Step]) -> str:
        for step in reversed(body):
            slug = slugs.get(step.execution_id)
            if slug:
                return slug
        return DEFAULT_MODEL

    return Recording(
        format="sqlite",
        path=path,
        steps=steps,
        turns=_split_turns(steps, model_of),
        conversation_id=conversation_id,
    )


def _generator_slugs(rows: Iterable[tuple[int, bytes]], warn: Warn) -> dict[str, str]:
    """execution id -> model slug, from gen_metadata (1.19 slug, 4 execution id)."""
    slugs: dict[str, str] = {}
    for idx, data in rows:
        try:
            record = Message(data)
            slug = record.path_string(1, 19)
            execution = record.string(4)
        except DecodeError as exc:
            warn(f"gen_metadata {idx}: skipped, {exc}")
            continue
        if slug:
            slugs[execution] = slug
    return slugs


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path} as UTF-8 text: {exc}") from exc


def _load_rpc(path: str, warn: Warn) -> Recording:
    try:
        data: Any = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{path} is not an agy conversation database, RPC step capture or stream-json "
            f"capture (not JSON: {exc})"
        ) from exc
    if isinstance(data, dict) and "steps" not in data and "type" in data:
        data = [data]  # a single step object
    raw_steps = data.get("steps") if isinstance(data, dict) else data
    if not isinstance(raw_steps, list):
        raise UsageError(f'{path} has no steps list (expected {{"steps": [...]}} or a bare list)')
    latest: dict[int, Step] = {}
    for position, raw in enumerate(raw_steps):
        try:
            step = decode_json_step(raw, position=position)
        except DecodeError as exc:
            warn(f"step {position}: skipped, {exc}")
            continue
        latest[step.index] = step
    steps = [latest[i] for i in sorted(latest)]
    conversation = next((s.conversation_id for s in steps if s.conversation_id), "")
    return Recording(
        format="rpc",
        path=path,
        steps=steps,
        turns=_split_turns(steps, lambda _body: DEFAULT_MODEL),
        conversation_id=conversation,
    )


def _load_stream_json(path: str, warn: Warn) -> Recording:
    decoder = StreamJsonDecoder()
    turns: list[_TurnInput] = []
    batches: list[list[Step]] = []
    user: Step | None = None
    latest: dict[int, Step] = {}
    any_event = False
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise DecodeError("line is not a JSON object")
            result = decoder.feed(event)
        except (ValueError, DecodeError) as exc:
            warn(f"line {number}: skipped, {exc}")
            continue
        any_event = True
        if isinstance(result, TurnOutcome):
            turns.append(_TurnInput(user=user, batches=batches, outcome=result))
            batches, user = [], None
        elif isinstance(result, Step):
            latest[result.index] = result
            if result.kind is StepKind.USER:
                user = result
            else:
                batches.append([result])
    if not any_event:
        raise UsageError(f"{path} holds no stream-json events")
    if batches or user is not None:
        turns.append(_TurnInput(user=user, batches=batches))  # a capture cut before its result
    steps = [latest[i] for i in sorted(latest)]
    return Recording(
        format="stream-json",
        path=path,
        steps=steps,
        turns=turns,
        conversation_id=decoder.conversation_id,
    )
