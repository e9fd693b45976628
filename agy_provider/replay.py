"""Offline replay: a saved conversation database, RPC step capture or stream-json capture → turns of events.

Detects the format from the content, decodes with the same decoders and assembler live turns use.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agy_provider.agy.database import (
    iter_generator_rows,
    iter_step_rows,
    open_conversation_db,
    read_conversation_id,
    step_columns,
)
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step, StepKind, TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.assembler import StepAssembler
from agy_provider.errors import DatabaseError, DecodeError, UsageError
from agy_provider.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.types import AssistantMessage
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


class Recording:
    """A decoded file: its format, its turns (loaded one at a time) and every step.

    A database is read turn by turn — a column scan finds the USER rows, each turn's rows are
    decoded when that turn is replayed — so replaying a long conversation holds one turn in
    memory, not the whole file. Close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        *,
        format: str,
        path: str,
        turn_count: int,
        load_turn: Callable[[int], _TurnInput],
        iter_steps: Callable[[], Iterator[Step]],
        conversation_id: str = "",
        title: str = "",
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.format = format
        self.path = path
        self.turn_count = turn_count
        self.conversation_id = conversation_id
        self.title = title
        self._load_turn = load_turn
        self._iter_steps = iter_steps
        self._close = close

    def turn(self, position: int) -> _TurnInput:
        """The inputs of turn `position` (0-based)."""
        return self._load_turn(position)

    def steps(self) -> Iterator[Step]:
        """Every step in index order (newest snapshot per index)."""
        return self._iter_steps()

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _in_memory(
    format: str, path: str, steps: Sequence[Step], turns: Sequence[_TurnInput], conversation_id: str
) -> Recording:
    title = next(
        (s.title for s in reversed(steps) if s.kind is StepKind.CHECKPOINT and s.title), ""
    )
    return Recording(
        format=format,
        path=path,
        turn_count=len(turns),
        load_turn=turns.__getitem__,
        iter_steps=lambda: iter(steps),
        conversation_id=conversation_id,
        title=title,
    )


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
    for position in select_turns(recording.turn_count, turn):
        inputs = recording.turn(position)
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
        # The step_type column mirrors payload field 1; a saved file has no torn rows.
        users = [
            int(r[0])
            for r in conn.execute("SELECT idx FROM steps WHERE step_type = 14 ORDER BY idx")
        ]
        (first,) = conn.execute("SELECT MIN(idx) FROM steps").fetchone()
        slugs = _generator_slugs(iter_generator_rows(conn, path=path), warn)
        conversation_id = read_conversation_id(conn)
        title = _last_title(conn, path)
        columns = step_columns(conn)
    except (DatabaseError, sqlite3.DatabaseError) as exc:
        conn.close()
        raise UsageError(f"{path}: {exc}") from exc

    def rows(after: int = -1, before: int | None = None) -> Iterator[Step]:
        for row in iter_step_rows(conn, path=path, after=after, before=before, columns=columns):
            try:
                yield decode_step_row(
                    row.index,
                    row.step_type,
                    row.status,
                    row.payload,
                    metadata=row.metadata,
                    error_details=row.error_details,
                )
            except DecodeError as exc:
                warn(f"step {row.index}: skipped, {exc}")

    def model_of(body: Sequence[Step]) -> str:
        for step in reversed(body):
            slug = slugs.get(step.execution_id)
            if slug:
                return slug
        return DEFAULT_MODEL

    def load_turn(position: int) -> _TurnInput:
        if not users:
            body = list(rows())
            return _TurnInput(user=None, batches=[body], model=model_of(body))
        start = users[position]
        end = users[position + 1] if position + 1 < len(users) else None
        steps = list(rows(after=start - 1, before=end))
        user = steps[0] if steps and steps[0].index == start else None
        body = steps[1:] if user is not None else steps
        return _TurnInput(user=user, batches=[body], model=model_of(body))

    count = len(users) or (1 if first is not None else 0)
    return Recording(
        format="sqlite",
        path=path,
        turn_count=count,
        load_turn=load_turn,
        iter_steps=rows,
        conversation_id=conversation_id,
        title=title,
        close=conn.close,
    )


def _last_title(conn: sqlite3.Connection, path: str) -> str:
    """The newest checkpoint's title (AGY-FORMATS §3.3: 30.4), "" when there is none."""
    for row in conn.execute(
        "SELECT idx, step_type, status, step_payload FROM steps WHERE step_type = 23 "
        "ORDER BY idx DESC LIMIT 3"
    ):
        try:
            title = decode_step_row(*row).title
        except DecodeError:
            continue
        if title:
            return title
    return ""


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
    turns = _split_turns(steps, lambda _body: DEFAULT_MODEL)
    return _in_memory("rpc", path, steps, turns, conversation)


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
    return _in_memory("stream-json", path, steps, turns, decoder.conversation_id)
