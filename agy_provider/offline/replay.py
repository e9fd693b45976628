"""Offline replay: a saved conversation database, RPC step capture or stream-json capture → turns of events.

Detects the format from the content, decodes with the same decoders and assembler live turns use.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Final

from agy_provider.agy.database import (
    StepRow,
    first_step_index,
    iter_generator_rows,
    iter_step_rows,
    newest_checkpoint_rows,
    next_step_index,
    open_conversation_db,
    read_conversation_id,
    step_columns,
    user_step_indices,
)
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step, StepKind, TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder, decode_stream_json
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.diffs import BaselineProvider
from agy_provider.errors import DatabaseError, DecodeError, FramingError, UsageError
from agy_provider.pi.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.wire import jsontext
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
# Files are read in chunks of this size: big enough that a read is cheap, small enough that a
# capture of any size costs constant memory for its bytes.
_CHUNK_BYTES: Final = 64 * 1024
# Format detection looks this far into a file: agy's stream-json can start with a few lines of
# plain text (sign-in errors, notices) before its first event.
_HEAD_BYTES: Final = 64 * 1024
# A warning quotes at most this much of a decoder's message (hostile input can make it huge).
_MAX_REASON: Final = 300

Warn = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class _TurnInput:
    """One turn's inputs: its user step (if any), the snapshots in feed order, how it ended.

    `batches` may be a one-shot iterator (a stream-json turn is decoded while it is replayed);
    then `late_outcome`, read only once the batches are exhausted, says how the turn ended.
    """

    user: Step | None
    batches: Iterable[Sequence[Step]]
    outcome: TurnOutcome | None = None
    model: str = DEFAULT_MODEL
    late_outcome: Callable[[], TurnOutcome | None] | None = None

    def ending(self) -> TurnOutcome | None:
        return self.late_outcome() if self.late_outcome is not None else self.outcome


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
    """`sqlite`, `rpc` or `stream-json`, from the content.

    Raises:
        UsageError: the path is not a readable regular file (a FIFO, a device or a directory
            would hang or make no sense), or its content is none of the three.
    """
    with _open_regular(path) as handle:
        head = _read(handle, path, _HEAD_BYTES)
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    text = head.lstrip()
    if text.startswith(b"[") or (text.startswith(b"{") and b'"event"' not in text.split(b"\n")[0]):
        return "rpc"
    # stream-json: the first event may follow a few lines of plain text (agy prints sign-in
    # errors and notices on stdout); a bare `--output-format json` result is one object.
    for line in head.split(b"\n"):
        if line.lstrip().startswith(b"{"):
            return "stream-json"
    raise UsageError(
        f"{path} is not an agy conversation database, RPC step capture or stream-json capture"
    )


def load_recording(path: str | os.PathLike[str], *, warn: Warn | None = None) -> Recording:
    """Decode a file into steps and turns; skipped rows and lines are reported through `warn`.

    Raises:
        UsageError: the file cannot be read as any of the three formats (not found, not a
            regular file, not agy's, a malformed database).
    """
    path = os.fspath(path)
    warn = warn or (lambda text: log.warning("%s", text))
    fmt = detect_format(path)
    if fmt == "sqlite":
        return _load_sqlite(path, warn)
    if fmt == "rpc":
        return _load_rpc(path, warn)
    return _load_stream_json(path, warn)


def _open_regular(path: str) -> IO[bytes]:
    """Open `path` for reading bytes, refusing anything but a regular file.

    The open itself never blocks: `O_NONBLOCK` keeps a FIFO with no writer from hanging us
    before we can look at what we opened (it changes nothing for a regular file).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, socket or device"
            raise UsageError(
                f"{path} is {kind}, not a regular file: replay reads saved files only "
                "(save the stream to a file first)"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _chunks(path: str) -> Iterator[bytes]:
    """The bytes of a regular file, a chunk at a time."""
    with _open_regular(path) as handle:
        while chunk := _read(handle, path, _CHUNK_BYTES):
            yield chunk


def _read(handle: IO[bytes], path: str, size: int = -1) -> bytes:
    """Read bytes; an I/O error (EIO, or EAGAIN from a file that would block) is exit 2."""
    try:
        return handle.read(size)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "…"


def _guarded(what: str, decode: Callable[[], Step], warn: Warn) -> Step | None:
    """Run one decode; a bad row or line becomes one warning naming it, never an exception.

    A `DecodeError` is the decoders' contract. Anything else is a decoder bug: still only this
    row is lost, and the warning says to report it (the fuzz tests look for that text).
    """
    try:
        return decode()
    except DecodeError as exc:
        warn(f"{what}: skipped, {_reason(exc)}")
    except Exception as exc:
        warn(
            f"{what}: skipped, the decoder failed on it ({type(exc).__name__}: {_reason(exc)}); "
            "please report this as a bug"
        )
    return None


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
    recording: Recording,
    turn: str = "last",
    *,
    partials: bool = True,
    baselines: BaselineProvider | None = None,
) -> Iterator[ReplayedTurn]:
    """Assemble the selected turns into pi events, exactly as a live turn would have.

    `partials=False` leaves each event's `partial` empty (faster, for output that drops it).
    `baselines` gives edited files' old texts for their diffs (`diffs.GitBaselines` with
    `blocking=True` reads HEAD); without it edits are diffed from their calls alone.
    """
    for position in select_turns(recording.turn_count, turn):
        inputs = recording.turn(position)
        start = inputs.user.index if inputs.user is not None else -1
        assembler = StepAssembler(
            model=inputs.model,
            turn_start=start,
            timestamp=inputs.user.created_at_ms if inputs.user is not None else 0,
            track_partial=partials,
            baselines=baselines,
        )
        events: list[AssistantMessageEvent] = assembler.start()
        steps: dict[int, Step] = {}
        for batch in inputs.batches:
            events.extend(assembler.feed(batch))
            steps.update((s.index, s) for s in batch)
        events.extend(assembler.finish(inputs.ending()))
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
    # A database with a -wal or -shm beside it may be live, or left by a crash: opening it in
    # place, even read-only, makes SQLite create a -shm or write its read marks into one. Read a
    # private copy of the database and its -wal instead, so nothing beside the file changes.
    private = _private_copy(path) if _has_side_files(path) else None
    target = private[1] if private is not None else path

    def cleanup() -> None:
        if private is not None:
            shutil.rmtree(private[0], ignore_errors=True)

    try:
        conn = open_conversation_db(target, snapshot=True)
    except DatabaseError as exc:
        cleanup()
        raise UsageError(str(exc).replace(target, path)) from exc
    # A schema that is not UTF-8 makes sqlite3 raise UnicodeDecodeError (a ValueError), and a
    # malformed schema page can fail after the first check: database.py does not translate
    # those yet (see the report for the fix).
    except (sqlite3.Error, ValueError) as exc:
        cleanup()
        raise UsageError(f"{path} is not a readable database: {_reason(exc)}") from exc
    # A TEXT value that is not UTF-8 would make sqlite3 fail the whole scan: read it with
    # replacement characters, so only that row fails to decode.
    conn.text_factory = lambda data: data.decode("utf-8", "replace")

    def close() -> None:
        conn.close()
        cleanup()

    try:
        columns = step_columns(conn)
        if "idx" not in columns or "step_payload" not in columns:
            raise UsageError(f"{path}: the steps table lacks idx or step_payload")
        # The step_type column mirrors payload field 1; a saved file has no torn rows.
        users = user_step_indices(conn)
        first = first_step_index(conn)
        conversation_id = jsontext.clean_text(read_conversation_id(conn))
        title = _last_title(conn)
    except (DatabaseError, sqlite3.Error, ValueError) as exc:
        close()
        raise UsageError(f"{path} is not a readable database: {_reason(exc)}") from exc
    except BaseException:
        close()
        raise
    try:
        slugs = _generator_slugs(conn, path, warn)
    except BaseException:  # an interrupt: still remove the private copy
        close()
        raise

    def decode(row: StepRow) -> Step:
        return decode_step_row(
            row.index,
            row.step_type,
            row.status,
            row.payload,
            metadata=row.metadata,
            error_details=row.error_details,
        )

    def rows(after: int = -1, before: int | None = None) -> Iterator[Step]:
        # `position` is the raw idx the next read starts after: a hostile non-integer idx must
        # not be rounded, or a skipped row would be read again.
        position: Any = after
        while True:
            reader = iter_step_rows(conn, path=path, after=position, before=before, columns=columns)
            last: Any = position
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                # database.py reads each row's integer columns with int(); a row whose columns
                # hold text, a blob or an infinite real fails there (see the report for the fix).
                except (DatabaseError, sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
                    bad = _next_index(conn, path, last, before)
                    if bad is None:
                        warn(f"steps after {last}: not read, {_reason(exc)}")
                        return
                    warn(f"step {bad}: skipped, {_reason(exc)}")
                    position = bad
                    break
                last = row.index
                step = _guarded(f"step {row.index}", functools.partial(decode, row), warn)
                if step is not None:
                    yield step

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
        close=close,
    )


def _has_side_files(path: str) -> bool:
    return any(os.path.lexists(path + suffix) for suffix in ("-wal", "-shm", "-journal"))


def _private_copy(path: str) -> tuple[str, str]:
    """Copy the database and its -wal (never the -shm: SQLite rebuilds it from the -wal) into a
    private folder; returns (folder, the copy's path). The originals are only read."""
    folder = tempfile.mkdtemp(prefix="agy-replay-")
    copy = os.path.join(folder, "conversation.db")
    try:
        for suffix in ("", "-wal"):
            if suffix and not os.path.lexists(path + suffix):
                continue
            with _open_regular(path + suffix) as source, open(copy + suffix, "wb") as target:
                shutil.copyfileobj(source, target, _CHUNK_BYTES)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f"cannot copy {path} to read it: {exc.strerror or exc}") from exc
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, copy


def _next_index(conn: sqlite3.Connection, path: str, after: Any, before: int | None) -> Any:
    """The raw idx of the first row past `after` (the row a failed read stopped at), or None."""
    try:
        return next_step_index(conn, after, before)
    except (sqlite3.Error, ValueError) as exc:
        raise UsageError(f"{path} is not a readable database: {_reason(exc)}") from exc


def _last_title(conn: sqlite3.Connection) -> str:
    """The newest checkpoint's title (AGY-FORMATS §3.3: 30.4), "" when there is none."""
    for idx, step_type, status, payload in newest_checkpoint_rows(conn):
        if not isinstance(payload, bytes | None):
            continue
        try:
            title = decode_step_row(idx, int(step_type), status, payload).title
        except Exception:
            continue
        if title:
            return title
    return ""


def _generator_slugs(conn: sqlite3.Connection, path: str, warn: Warn) -> dict[str, str]:
    """execution id -> model slug, from gen_metadata (1.19 slug, 4 execution id)."""
    slugs: dict[str, str] = {}
    rows: Iterable[tuple[int, bytes]] = iter_generator_rows(conn, path=path)
    try:
        for idx, data in rows:
            try:
                record = Message(data)
                slug = record.path_string(1, 19)
                execution = record.string(4)
            except DecodeError as exc:
                warn(f"gen_metadata {idx}: skipped, {_reason(exc)}")
                continue
            if slug:
                slugs[execution] = slug
    # A malformed table or a non-integer idx (database.py reads it with int()) costs only the
    # model names: replay goes on with the default.
    except (DatabaseError, sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
        warn(f"gen_metadata: not read further, {_reason(exc)}")
    return slugs


def _load_rpc(path: str, warn: Warn) -> Recording:
    handle = _open_regular(path)
    try:
        data = _read(handle, path)
        stamp = _stamp(handle)
        # The steps array is located from the document's structure and each step parsed on its
        # own: a bad step is one warning, and memory never holds the whole document parsed.
        spans = jsontext.locate_array(data, "steps")
    except DecodeError as exc:
        handle.close()
        raise UsageError(
            f"{path} is not an agy conversation database, RPC step capture or stream-json "
            f"capture (not JSON: {_reason(exc)})"
        ) from exc
    except BaseException:
        handle.close()
        raise
    if spans is None:  # an object without a steps array: one step, or a json-format result
        handle.close()
        return _load_rpc_object(path, data, warn)

    def read(position: int, start: int, end: int, *, report: Warn) -> Step | None:
        try:
            raw = jsontext.loads(data_of(start, end), f"step {position}")
        except DecodeError as exc:
            report(f"step {position}: skipped, {_reason(exc)}")
            return None
        return _guarded(
            f"step {position}", functools.partial(decode_json_step, raw, position=position), report
        )

    loaded = data

    def data_of(start: int, end: int) -> bytes:
        if loaded:
            return loaded[start:end]
        if _stamp(handle) != stamp:
            raise UsageError(f"{path} changed while it was being replayed")
        try:
            return os.pread(handle.fileno(), end - start, start)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    # Pass 1: decode every step once (each warning said once), keeping only where the newest
    # step of each index lies, which indexes are user steps, the conversation id and the title.
    where: dict[int, tuple[int, int, int]] = {}
    users: set[int] = set()
    conversation = ""
    titled = (-1, "")
    for position, (start, end) in enumerate(spans):
        step = read(position, start, end, report=warn)
        if step is None:
            continue
        where[step.index] = (position, start, end)
        if step.kind is StepKind.USER:
            users.add(step.index)
        else:
            users.discard(step.index)
        conversation = conversation or step.conversation_id
        if step.kind is StepKind.CHECKPOINT and step.title and step.index >= titled[0]:
            titled = (step.index, step.title)
    del spans, data, loaded  # from here steps are read back from the file, a turn at a time
    loaded = b""
    order = sorted(where)
    starts = [n for n, index in enumerate(order) if index in users]
    if order and not starts:
        starts = [0]
    ends = [*starts[1:], len(order)]

    def silent(_text: str) -> None:
        pass

    def step_at(index: int) -> Step | None:
        position, start, end = where[index]
        return read(position, start, end, report=silent)

    def load_turn(turn: int) -> _TurnInput:
        indexes = order[starts[turn] : ends[turn]]
        user = step_at(indexes[0]) if indexes and indexes[0] in users else None
        body = [s for s in map(step_at, indexes[1:] if user else indexes) if s is not None]
        return _TurnInput(user=user, batches=[body])

    def iter_steps() -> Iterator[Step]:
        return (s for s in map(step_at, order) if s is not None)

    return Recording(
        format="rpc",
        path=path,
        turn_count=len(starts),
        load_turn=load_turn,
        iter_steps=iter_steps,
        conversation_id=conversation,
        title=titled[1],
        close=handle.close,
    )


def _stamp(handle: IO[bytes]) -> tuple[int, int]:
    info = os.fstat(handle.fileno())
    return info.st_size, info.st_mtime_ns


def _load_rpc_object(path: str, data: bytes, warn: Warn) -> Recording:
    try:
        document: Any = jsontext.loads(data, "the file")
    except DecodeError as exc:
        raise UsageError(
            f"{path} is not an agy conversation database, RPC step capture or stream-json "
            f"capture ({_reason(exc)})"
        ) from exc
    if isinstance(document, dict) and "num_turns" in document:
        return _load_json_result(path, document)
    if not isinstance(document, dict) or "type" not in document:
        raise UsageError(f'{path} has no steps list (expected {{"steps": [...]}} or a bare list)')
    step = _guarded("step 0", functools.partial(decode_json_step, document, position=0), warn)
    steps = [step] if step is not None else []
    turns = _split_turns(steps, lambda _body: DEFAULT_MODEL)
    return _in_memory("rpc", path, steps, turns, step.conversation_id if step else "")


def _load_json_result(path: str, document: dict[str, Any]) -> Recording:
    """`agy -p --output-format json`: one result object (maybe pretty-printed), one turn."""
    decoder = StreamJsonDecoder()
    try:
        items = decoder.feed_event(document)
    except DecodeError as exc:
        raise UsageError(f"{path}: not an agy result ({_reason(exc)})") from exc
    steps = [item for item in items if isinstance(item, Step)]
    outcome = next((item for item in items if isinstance(item, TurnOutcome)), None)
    turn = _TurnInput(user=None, batches=[steps], outcome=outcome)
    return _in_memory("stream-json", path, steps, [turn], decoder.conversation_id)


class _StreamJsonTurns:
    """Reads a stream-json capture's turns in order, decoding the file as they are replayed.

    Holds one turn's state and a chunk of the file, never the whole capture: each turn's
    `batches` is an iterator over the decoder's snapshots, and must be drained (replay does)
    before the next turn is read; `next_turn` drains what is left otherwise.
    """

    def __init__(self, path: str, on_skip: Warn) -> None:
        self._on_skip = on_skip
        self.decoder = StreamJsonDecoder(coalesce=True, on_skip=on_skip)
        self._items = decode_stream_json(_chunks(path), decoder=self.decoder)
        self._open: Iterator[Sequence[Step]] | None = None
        self.title = ""
        self.turns_read = 0

    def _next(self) -> Step | TurnOutcome | None:
        try:
            item = next(self._items, None)
        except FramingError as exc:  # a line over the framer's bound: nothing after it is read
            self._on_skip(f"the rest of the file: not read, {_reason(exc)}")
            self._items = iter(())
            return None
        if isinstance(item, Step) and item.kind is StepKind.CHECKPOINT and item.title:
            self.title = item.title
        return item

    def next_turn(self) -> _TurnInput | None:
        """The next turn, or None when the capture has no more."""
        if self._open is not None:
            for _ in self._open:
                pass
            self._open = None
        user: Step | None = None
        item = self._next()
        while isinstance(item, Step) and item.kind is StepKind.USER:
            user, item = item, self._next()
        if item is None and user is None:
            return None
        self.turns_read += 1
        ending: list[TurnOutcome | None] = [None]

        def body(item: Step | TurnOutcome | None) -> Iterator[Sequence[Step]]:
            while item is not None:
                if isinstance(item, TurnOutcome):
                    ending[0] = item
                    return
                if item.kind is not StepKind.USER:  # a repeated user step is not the answer
                    yield (item,)
                item = self._next()

        self._open = body(item)
        return _TurnInput(
            user=user,
            batches=self._open,
            model=self.decoder.model or DEFAULT_MODEL,  # `init.model` (1.3.2+), when agy said
            late_outcome=lambda: ending[0],
        )


def _load_stream_json(path: str, warn: Warn) -> Recording:
    # One pass to count the turns and report every skipped line once; each replayed turn is
    # then decoded again from the file, lazily, so memory never holds the whole capture.
    counter = _StreamJsonTurns(path, warn)
    count = 0
    while counter.next_turn() is not None:
        count += 1
    if not count and not counter.decoder.conversation_id:
        raise UsageError(f"{path} holds no stream-json events")
    reader: list[_StreamJsonTurns] = []

    def silent(_text: str) -> None:
        pass

    def load_turn(position: int) -> _TurnInput:
        if not reader or reader[0].turns_read > position:
            reader[:] = [_StreamJsonTurns(path, silent)]
        current = reader[0]
        while current.turns_read < position:
            current.next_turn()
        turn = current.next_turn()
        return turn if turn is not None else _TurnInput(user=None, batches=())

    def iter_steps() -> Iterator[Step]:
        latest: dict[int, Step] = {}
        walker = _StreamJsonTurns(path, silent)
        while (turn := walker.next_turn()) is not None:
            if turn.user is not None:
                latest[turn.user.index] = turn.user
            for batch in turn.batches:
                latest.update((s.index, s) for s in batch)
        return iter([latest[i] for i in sorted(latest)])

    return Recording(
        format="stream-json",
        path=path,
        turn_count=count,
        load_turn=load_turn,
        iter_steps=iter_steps,
        conversation_id=counter.decoder.conversation_id,
        title=counter.title,
    )
