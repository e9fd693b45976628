"""Host session id → agy conversation, in one JSON store shared safely by many processes.

Each update locks, re-reads, merges its records and replaces the file atomically (`atomic.py`). A
store that cannot be read or written costs resumption, never a turn: one warning, then on we go.
A host holds no record it did not ask for: a lookup maps the file and parses its own line, and a
save copies every line it does not change as bytes (`session_lines.py`), so a host's memory and a
turn's work stay flat however many records the store keeps.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agy_provider.agy.argv import valid_conversation_id
from agy_provider.errors import DecodeError
from agy_provider.store import session_lines as lines
from agy_provider.store.atomic import file_lock
from agy_provider.store.atomic import write_bytes_atomic
from agy_provider.wire import jsontext

__all__ = [
    "SESSIONS_ENV",
    "SessionRecord",
    "SessionStore",
    "StoreView",
    "default_store_path",
    "valid_conversation_id",
]

log = logging.getLogger(__name__)

SESSIONS_ENV = "AGY_PROVIDER_SESSIONS"


@dataclasses.dataclass(frozen=True, slots=True)
class SessionRecord:
    """What we remember of a host session: its agy conversation and how far we have read it.

    `history_digest` fingerprints the conversation as the host will next present it, so a turn can
    tell whether the host's history still matches what agy holds. A conversation's own record
    (`continuity.conversation_key`) also holds the token of the newest message we marked
    (`mark`, proved by `history_digest`) and of the newest one that was an answer
    (`answered_mark`, proved by `answered_digest`): the turns after it failed or were aborted.
    """

    conversation_id: str
    last_step_index: int = -1
    event_source: str = ""
    agy_version: str = ""
    history_digest: str = ""
    updated_at: float = 0.0
    mark: str = ""
    answered_mark: str = ""
    answered_digest: str = ""

    def to_json(self) -> dict[str, Any]:
        # By hand: `dataclasses.asdict` deep-copies every value, and a store write encodes
        # every record.
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionRecord:
        conversation_id = data.get("conversation_id")
        if not isinstance(conversation_id, str) or not valid_conversation_id(conversation_id):
            raise ValueError(f"bad conversation_id {conversation_id!r}")
        last = data.get("last_step_index", -1)
        if not isinstance(last, int) or isinstance(last, bool):
            raise ValueError(f"bad last_step_index {last!r}")
        return cls(
            conversation_id=conversation_id,
            last_step_index=last,
            event_source=str(data.get("event_source", "")),
            agy_version=str(data.get("agy_version", "")),
            history_digest=str(data.get("history_digest", "")),
            updated_at=float(data.get("updated_at", 0.0)),
            mark=str(data.get("mark", "")),
            answered_mark=str(data.get("answered_mark", "")),
            answered_digest=str(data.get("answered_digest", "")),
        )


_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(SessionRecord))


def default_store_path() -> Path:
    """`$AGY_PROVIDER_SESSIONS`, else `$XDG_STATE_HOME/agy-provider/sessions.json`."""
    explicit = os.environ.get(SESSIONS_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "agy-provider" / "sessions.json"


# Records of conversations continued by their marks (`conv:<id>`, one per conversation a
# stateless host ran): the oldest go once there are more than this, so the store stays small.
MAX_CONVERSATION_RECORDS = 2000
_CONVERSATION_PREFIX = "conv:"


def _prune_conversations(records: dict[str, SessionRecord]) -> None:
    keys = [k for k in records if k.startswith(_CONVERSATION_PREFIX)]
    if len(keys) <= MAX_CONVERSATION_RECORDS:
        return
    keys.sort(key=lambda k: records[k].updated_at)
    for key in keys[: len(keys) - MAX_CONVERSATION_RECORDS]:
        del records[key]


# Problems already reported, by (store path, what failed): a store that cannot be written would
# otherwise repeat the same warning on every turn of a long-running host.
_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def _warn_once(path: Path, what: str, message: str) -> None:
    with _reported_lock:
        if (str(path), what) in _reported:
            return
        _reported.add((str(path), what))
    log.warning("%s", message)


def _resolved(path: Path, what: str) -> None:
    """The problem is gone: report it again should it come back."""
    with _reported_lock:
        _reported.discard((str(path), what))


class SessionStore:
    """The store at `path`. Reads never lock; writes lock, merge and replace atomically.

    Neither `get` nor `put` raises for a store that is unreadable, corrupt or unwritable: `get`
    answers None (the turn starts a new conversation), `put` logs one warning and returns.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_store_path()

    def _map(self) -> lines.Buffer:
        """The file as it is now: a read-only map of it (its inode stays readable after a writer
        replaces it), b"" when it is empty, None when there is none.

        Raises OSError when the file exists but cannot be read: a writer must then not replace it.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size == 0:
                return b""
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def _read(self) -> StoreView:
        """The store as it is now: its lines found when asked for, or (another layout, or a
        corrupt file) parsed whole."""
        try:
            buf = self._map()
        except OSError as exc:
            _warn_once(
                self.path,
                "read",
                f"could not read the session store {self.path} ({exc.strerror or exc}); sessions "
                "cannot resume until it is readable, so their turns start new agy conversations. "
                f"Fix its permissions or set {SESSIONS_ENV} to a file you own",
            )
            return StoreView(self, None, {})
        _resolved(self.path, "read")
        if buf is None:
            return StoreView(self, None, {})
        if lines.is_line_layout(buf):
            return StoreView(self, buf, None)
        records, corrupt = self._parse(bytes(buf))
        _release(buf)
        if corrupt:
            _warn_once(
                self.path,
                "corrupt",
                f"session store {self.path} is corrupt: {corrupt}. Its sessions are ignored (their "
                f"next turns start new agy conversations); the next save sets it aside as "
                f"{self._aside()} and starts a fresh store. Delete either file if you do not need it",
            )
        return StoreView(self, None, records)

    def _parse(self, data: bytes) -> tuple[dict[str, SessionRecord], str]:
        """A file of another layout, parsed whole: its records, and why the file as a whole was
        unusable ("" when it was fine)."""
        try:
            # Strict JSON (`wire/jsontext`): nesting past its bound, `NaN` or a huge number is
            # corruption too, never a RecursionError in a caller.
            document = jsontext.loads(data, what="its content")
        except DecodeError as exc:
            return {}, f"it is not JSON ({exc})"
        sessions = document.get("sessions") if isinstance(document, dict) else None
        if not isinstance(sessions, dict):
            return {}, 'it has no "sessions" object'
        records: dict[str, SessionRecord] = {}
        dropped: list[str] = []
        for key, value in sessions.items():
            try:
                records[str(key)] = SessionRecord.from_json(value)
            except _MALFORMED as exc:
                dropped.append(f"{key!r} ({exc})")
        self._malformed(dropped)
        if not dropped:
            _resolved(self.path, "records")
        return records, ""

    def _line_record(self, buf: lines.Buffer, key: str) -> SessionRecord | None:
        """`key`'s record, parsed from its own line alone; None when it has none, or a malformed
        one (said once)."""
        span = lines.find_line(buf, key)
        if span is None:
            return None
        try:
            found, value = lines.parse_line(buf[span[0] : span[1]])
            if found != key:
                raise ValueError(f"its line names {found!r}")
            return SessionRecord.from_json(value)
        except (DecodeError, *_MALFORMED) as exc:
            self._malformed([f"{key!r} ({exc})"])
            return None

    def _all_lines(self, buf: lines.Buffer) -> dict[str, SessionRecord]:
        """Every record of a file of the line layout, each parsed from its own line."""
        records: dict[str, SessionRecord] = {}
        dropped: list[str] = []
        for line in lines.iter_lines(buf):
            try:
                key, value = lines.parse_line(line)
                records[key] = SessionRecord.from_json(value)
            except (DecodeError, *_MALFORMED) as exc:
                dropped.append(f"{line[:60]!r} ({exc})")
        self._malformed(dropped)
        return records

    def _malformed(self, dropped: list[str]) -> None:
        if dropped:
            _warn_once(
                self.path,
                "records",
                f"session store {self.path}: {len(dropped)} session(s) ignored because their "
                f"records are malformed: {'; '.join(dropped[:5])}. Their next turns start new agy "
                "conversations, whose saves replace them",
            )

    def _aside(self) -> Path:
        return self.path.with_name(self.path.name + ".corrupt")

    def get(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None (unknown session, or a store that cannot be read)."""
        return self._read().get(session_id)

    def all(self) -> Mapping[str, SessionRecord]:
        """The store as it is now, read-only: a record is parsed when asked for (`get`), and
        every one only when the whole is listed."""
        return self._read()

    def put(self, session_id: str, record: SessionRecord) -> None:
        """Store `record` under `session_id`, keeping every other process's records.

        A store that cannot be written (read-only folder, full disk) logs one warning naming the
        path and what to do, and returns: the turn was already delivered.
        """
        self.put_many({session_id: record})

    def put_many(self, records: Mapping[str, SessionRecord]) -> None:
        """Store several records in one locked write (a turn's session and its conversation).

        Returns once a write holding them has landed. Saves of this process at the same time
        share writes (a group commit, `_GroupCommits`): the records given while one write runs
        go together in the next, so fifty turns ending at once cost a few writes, not fifty.
        """
        if not records:
            return
        self._said(records, _COMMITS.commit(self.path, self._stamped(records), self._write_batch))

    def save_later(self, records: Mapping[str, SessionRecord]) -> concurrent.futures.Future[None]:
        """`put_many` without waiting (from a loop): the future is done once the records are
        written, or a warning said why they could not be (it never holds an OSError)."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not records:
            done.set_result(None)
            return done
        if type(self).put_many is not SessionStore.put_many:
            # A store of someone else's making keeps records its own way (in memory, say): its
            # `put_many` is called, in a worker, as every save did before the shared writes.
            from agy_provider.workers import in_background

            return in_background(self.put_many, records)

        def said(written: concurrent.futures.Future[OSError | None]) -> None:
            try:
                self._said(records, written.result())
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        written = _COMMITS.submit(self.path, self._stamped(records), self._write_batch)
        written.add_done_callback(said)
        return done

    @staticmethod
    def _stamped(records: Mapping[str, SessionRecord]) -> dict[str, SessionRecord]:
        now = time.time()
        return {k: dataclasses.replace(v, updated_at=now) for k, v in records.items()}

    def _said(self, records: Mapping[str, SessionRecord], error: OSError | None) -> None:
        if error is None:
            _resolved(self.path, "write")
            return
        _warn_once(
            self.path,
            "write",
            f"could not save session {', '.join(map(repr, records))} to {self.path} "
            f"({error.strerror or error}); this turn is complete, but the session's next "
            f"turn will start a new agy conversation. Make {self.path.parent} writable, free "
            f"disk space, or set {SESSIONS_ENV} to a writable file",
        )

    def _write_batch(self, batch: Mapping[str, SessionRecord]) -> None:
        with file_lock(self.path):
            self._update(batch)

    def delete(self, session_id: str) -> None:
        """Forget `session_id` (a store that cannot be written logs one warning)."""
        try:
            with file_lock(self.path):
                self._update({}, (session_id,))
        except OSError as exc:
            _warn_once(
                self.path,
                "write",
                f"could not remove session {session_id!r} from {self.path} "
                f"({exc.strerror or exc}); make {self.path.parent} writable or set "
                f"{SESSIONS_ENV} to a writable file",
            )

    def _update(self, upserts: Mapping[str, SessionRecord], deletes: tuple[str, ...] = ()) -> None:
        """Under the lock: re-read, store `upserts`, forget `deletes`, keep the newest
        conversation records, write. A file of the line layout keeps every other line as it
        was; any other is parsed whole and written anew (a corrupt one set aside first, so
        whatever it held can still be looked at)."""
        buf = self._map()
        try:
            if buf is not None and lines.is_line_layout(buf, whole=True):
                pieces = self._merged(buf, upserts, deletes)
                if pieces is not None:
                    write_bytes_atomic(self.path, pieces)
                del pieces
                return
            records, corrupt = self._parse(bytes(buf)) if buf is not None else ({}, "")
            changed = bool(upserts)
            for key in deletes:
                changed = records.pop(key, None) is not None or changed
            records.update(upserts)
            _prune_conversations(records)
            if not changed and not corrupt:
                return
            if corrupt:
                os.replace(self.path, self._aside())
                _warn_once(
                    self.path,
                    "corrupt",
                    f"session store {self.path} was corrupt ({corrupt}): set aside as "
                    f"{self._aside()}, and a fresh store replaces it",
                )
                _resolved(self.path, "corrupt")
            text = lines.store_text(
                [
                    lines.encode_line(key, record.to_json())
                    for key, record in sorted(records.items())
                ]
            )
            write_bytes_atomic(self.path, [text])
        finally:
            _release(buf)

    @staticmethod
    def _merged(
        buf: lines.Buffer, upserts: Mapping[str, SessionRecord], deletes: tuple[str, ...]
    ) -> list[Any] | None:
        """The file with `upserts` in place (new keys at its end) and `deletes` gone, and the
        oldest conversation records past the bound; None when nothing changes."""
        drop: dict[int, int] = {}  # start → end of each line that goes
        for key in (*upserts, *deletes):
            span = lines.find_line(buf, key)
            if span is not None:
                drop[span[0]] = span[1]
        if not upserts and not drop:
            return None
        others = [
            found
            for found in lines.conversation_lines(buf, _CONVERSATION_PREFIX)
            if found[1] not in drop
        ]
        adding = sum(1 for key in upserts if key.startswith(_CONVERSATION_PREFIX))
        excess = len(others) + adding - MAX_CONVERSATION_RECORDS
        if excess > 0:
            others.sort()  # oldest first
            drop.update((start, end) for _, start, end in others[:excess])
        add = [lines.encode_line(key, record.to_json()) for key, record in upserts.items()]
        return lines.rewrite(buf, list(drop.items()), add)


class StoreView(Mapping[str, SessionRecord]):
    """The store as read at one moment, read-only. A record is parsed when asked for; listing
    them (iterating, `len`) parses every line once."""

    def __init__(
        self,
        store: SessionStore,
        buf: lines.Buffer,
        records: dict[str, SessionRecord] | None,
    ) -> None:
        self._store = store
        self._buf = buf  # the file's map, while no listing has parsed it whole
        self._records = records

    def __getitem__(self, key: str) -> SessionRecord:
        if self._records is not None:
            return self._records[key]
        record = self._store._line_record(self._buf, key)
        if record is None:
            raise KeyError(key)
        return record

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def _all(self) -> dict[str, SessionRecord]:
        if self._records is None:
            self._records = self._store._all_lines(self._buf)
            _release(self._buf)
            self._buf = None
        return self._records


# What a record's JSON may raise in `SessionRecord.from_json`.
_MALFORMED = (ValueError, TypeError, AttributeError, OverflowError)


def _release(buf: lines.Buffer) -> None:
    """Unmap `buf` now (a view of it still alive: when that goes)."""
    if isinstance(buf, mmap.mmap):
        with contextlib.suppress(BufferError):
            buf.close()


class _Batch:
    """Records written together; `written` once their write landed (None) or failed (its
    OSError; anything else it raised is the future's exception)."""

    def __init__(self) -> None:
        self.records: dict[str, SessionRecord] = {}
        self.written: concurrent.futures.Future[OSError | None] = concurrent.futures.Future()


class _GroupCommits:
    """Concurrent saves to one store share writes: one thread writes at a time, and the records
    given meanwhile wait together in the next batch, which it writes next. A save from the loop
    (`submit`) occupies no thread while it waits (a task of the worker pool writes, unless a
    writer is at work already); a blocking save (`commit`) waits only for a writer that is
    running, never for a pool task that may be queued behind it, and else writes itself."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next: dict[str, _Batch] = {}  # the batch each store's next write takes
        self._writing: set[str] = set()  # stores a thread is writing batches of now
        self._scheduled: set[str] = set()  # stores a pool task will write batches of

    def submit(
        self,
        path: Path,
        records: Mapping[str, SessionRecord],
        write: Callable[[Mapping[str, SessionRecord]], None],
    ) -> concurrent.futures.Future[OSError | None]:
        """`records` into the store's next write, without waiting."""
        key = str(path)
        with self._changed:
            batch = self._add(key, records)
            schedule = key not in self._scheduled and key not in self._writing
            if schedule:
                self._scheduled.add(key)
        if schedule:
            # Imported here: the worker threads start when their module loads, and a reader of
            # the store (the CLI's `sessions`) needs none.
            from agy_provider.workers import in_background

            in_background(self._scheduled_write, key, write)
        return batch.written

    def commit(
        self,
        path: Path,
        records: Mapping[str, SessionRecord],
        write: Callable[[Mapping[str, SessionRecord]], None],
    ) -> OSError | None:
        """`records` written (blocking); the OSError of the write that held them, else None.
        Whatever else that write raised is raised here."""
        key = str(path)
        with self._changed:
            batch = self._add(key, records)
            while key in self._writing and not batch.written.done():
                self._changed.wait()
            write_here = not batch.written.done()
            if write_here:
                self._writing.add(key)
        if write_here:
            self._write_all(key, write)
        return batch.written.result()

    def _add(self, key: str, records: Mapping[str, SessionRecord]) -> _Batch:
        batch = self._next.setdefault(key, _Batch())
        batch.records.update(records)  # a newer record of the same key wins
        return batch

    def _scheduled_write(
        self, key: str, write: Callable[[Mapping[str, SessionRecord]], None]
    ) -> None:
        with self._changed:
            self._scheduled.discard(key)
            if key in self._writing:
                return  # the writer at work writes every batch there is
            self._writing.add(key)
        self._write_all(key, write)

    def _write_all(self, key: str, write: Callable[[Mapping[str, SessionRecord]], None]) -> None:
        """Write the store's batches one after another until none is left (`_writing` held)."""
        while True:
            with self._changed:
                batch = self._next.pop(key, None)
                if batch is None:
                    self._writing.discard(key)
                    self._changed.notify_all()
                    return
            try:
                write(batch.records)
            except OSError as exc:
                batch.written.set_result(exc)
            except BaseException as exc:
                batch.written.set_exception(exc)
            else:
                batch.written.set_result(None)
            with self._changed:
                self._changed.notify_all()


_COMMITS = _GroupCommits()
