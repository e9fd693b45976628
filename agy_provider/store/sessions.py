"""Host session id → agy conversation, in one JSON store shared safely by many processes.

Each update locks, re-reads, merges one record and replaces the file atomically (`atomic.py`). A
store that cannot be read or written costs resumption, never a turn: one warning, then on we go.
A read parses the file only when its bytes differ from what this process last read or wrote: every
turn reads the store twice and writes it once, and a host with thousands of records would
otherwise parse all of them at each read.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agy_provider.agy.argv import valid_conversation_id
from agy_provider.errors import DecodeError
from agy_provider.store.atomic import file_lock
from agy_provider.store.atomic import write_text_atomic
from agy_provider.wire import jsontext

__all__ = [
    "SESSIONS_ENV",
    "SessionRecord",
    "SessionStore",
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


# What this process last read or wrote, by store path: the file's bytes, their records (never
# handed out: callers get a copy) and why the file was unusable ("" when it was fine). Reading
# and comparing the bytes costs microseconds; parsing them, milliseconds per thousand records.
_Parsed = tuple[bytes, dict[str, SessionRecord], str]
_parsed: dict[str, _Parsed] = {}
_parsed_lock = threading.Lock()
# Stores remembered at once: a host has one; a test suite makes hundreds, one per temp folder.
_PARSED_STORES = 8


def _remember(path: Path, parsed: _Parsed) -> None:
    with _parsed_lock:
        _parsed.pop(str(path), None)
        if len(_parsed) >= _PARSED_STORES:
            del _parsed[next(iter(_parsed))]  # the one remembered longest ago
        _parsed[str(path)] = parsed


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

    def _load(self) -> tuple[dict[str, SessionRecord], str]:
        """The records (a copy the caller may change), and why the file as a whole was unusable
        ("" when it was fine). Parses the file only when it changed since this process last saw it.

        Raises OSError when the file exists but cannot be read: a writer must then not replace it.
        """
        try:
            data = _read_bytes(self.path)
        except FileNotFoundError:
            return {}, ""
        with _parsed_lock:
            known = _parsed.get(str(self.path))
        if known is None or known[0] != data:
            known = (data, *self._parse(data))
            _remember(self.path, known)
        return dict(known[1]), known[2]

    def _parse(self, data: bytes) -> tuple[dict[str, SessionRecord], str]:
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
            except (ValueError, TypeError, AttributeError, OverflowError) as exc:
                dropped.append(f"{key!r} ({exc})")
        if dropped:
            _warn_once(
                self.path,
                "records",
                f"session store {self.path}: {len(dropped)} session(s) ignored because their "
                f"records are malformed: {'; '.join(dropped[:5])}. Their next turns start new agy "
                "conversations; the next save of any session drops them from the file",
            )
        else:
            _resolved(self.path, "records")
        return records, ""

    def _records(self) -> dict[str, SessionRecord]:
        try:
            records, corrupt = self._load()
        except OSError as exc:
            _warn_once(
                self.path,
                "read",
                f"could not read the session store {self.path} ({exc.strerror or exc}); sessions "
                "cannot resume until it is readable, so their turns start new agy conversations. "
                f"Fix its permissions or set {SESSIONS_ENV} to a file you own",
            )
            return {}
        _resolved(self.path, "read")
        if corrupt:
            _warn_once(
                self.path,
                "corrupt",
                f"session store {self.path} is corrupt: {corrupt}. Its sessions are ignored (their "
                f"next turns start new agy conversations); the next save sets it aside as "
                f"{self._aside()} and starts a fresh store. Delete either file if you do not need it",
            )
        return records

    def _aside(self) -> Path:
        return self.path.with_name(self.path.name + ".corrupt")

    def get(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None (unknown session, or a store that cannot be read)."""
        return self._records().get(session_id)

    def all(self) -> Mapping[str, SessionRecord]:
        return self._records()

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
        def change(current: dict[str, SessionRecord]) -> bool:
            current.update(batch)
            _prune_conversations(current)
            return True

        with file_lock(self.path):
            self._update(change)

    def delete(self, session_id: str) -> None:
        """Forget `session_id` (a store that cannot be written logs one warning)."""
        try:
            with file_lock(self.path):
                self._update(lambda records: records.pop(session_id, None) is not None)
        except OSError as exc:
            _warn_once(
                self.path,
                "write",
                f"could not remove session {session_id!r} from {self.path} "
                f"({exc.strerror or exc}); make {self.path.parent} writable or set "
                f"{SESSIONS_ENV} to a writable file",
            )

    def _update(self, change: Callable[[dict[str, SessionRecord]], bool]) -> None:
        """Under the lock: re-read, apply `change` (True when it changed something), write.

        A corrupt file is set aside first, so whatever it held can still be looked at.
        """
        records, corrupt = self._load()
        if not change(records) and not corrupt:
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
        text = _store_text(records)
        write_text_atomic(self.path, text)
        _remember(self.path, (text.encode(), dict(records), ""))  # no parsing back what we wrote


def _read_bytes(path: Path) -> bytes:
    """The file's bytes in four system calls (`Path.read_bytes` makes nine: each one lets
    another thread take the interpreter, and a busy host's turns read the store at every turn)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)  # short of `size + 1` (a regular file's end): all of it
        if len(data) <= size:
            return data
        chunks = [data]  # it grew meanwhile
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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


# Each record's line as last written, by key: a write re-encodes only the records that changed.
_lines: dict[str, tuple[SessionRecord, str]] = {}
_LINES_KEPT = 2 * MAX_CONVERSATION_RECORDS


def _store_line(key: str, record: SessionRecord) -> str:
    known = _lines.get(key)
    if known is not None and known[0] == record:
        return known[1]
    line = f"    {json.dumps(key)}: {json.dumps(record.to_json(), sort_keys=True)}"
    if len(_lines) >= _LINES_KEPT:
        _lines.clear()  # many stores, or a huge one: start again (a cache, nothing more)
    _lines[key] = (record, line)
    return line


def _store_text(records: Mapping[str, SessionRecord]) -> str:
    """The store's JSON, one record per line (readable, and encoded by `json`'s C encoder: an
    indented dump goes through its pure-Python one, milliseconds per hundred records)."""
    lines = [_store_line(key, record) for key, record in sorted(records.items())]
    body = "\n" + ",\n".join(lines) + "\n  " if lines else ""
    return f'{{\n  "sessions": {{{body}}},\n  "version": 1\n}}\n'
