"""Load a saved conversation database (agy's SQLite) as a `Recording`, a turn at a time.

Owns reading a database without changing anything beside it (a private copy when a -wal or -shm
is there) and going on past bad rows; the rows themselves are decoded by `agy/rows.py`.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

from agy_provider.agy.database import StepRow
from agy_provider.agy.database import first_step_index
from agy_provider.agy.database import iter_generator_rows
from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import newest_checkpoint_rows
from agy_provider.agy.database import next_step_index
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.database import read_conversation_id
from agy_provider.agy.database import step_columns
from agy_provider.agy.database import user_step_indices
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import Step
from agy_provider.errors import DatabaseError
from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError
from agy_provider.offline.recording import CHUNK_BYTES
from agy_provider.offline.recording import DEFAULT_MODEL
from agy_provider.offline.recording import Recording
from agy_provider.offline.recording import TurnInput
from agy_provider.offline.recording import Warn
from agy_provider.offline.recording import guarded_decode
from agy_provider.offline.recording import open_regular
from agy_provider.offline.recording import short_reason
from agy_provider.owned_folders import make_owned_folder
from agy_provider.wire import jsontext
from agy_provider.wire.protowire import Message

__all__ = ["decode_row", "load_sqlite"]


def _open_snapshot(path: str) -> tuple[sqlite3.Connection, Callable[[], None]]:
    """The database opened read-only as a snapshot, and how to close it (and its copy)."""
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
        raise UsageError(f"{path} is not a readable database: {short_reason(exc)}") from exc
    # A TEXT value that is not UTF-8 would make sqlite3 fail the whole scan: read it with
    # replacement characters, so only that row fails to decode.
    conn.text_factory = lambda data: data.decode("utf-8", "replace")

    def close() -> None:
        conn.close()
        cleanup()

    return conn, close


def load_sqlite(path: str, warn: Warn) -> Recording:
    """A saved database as a `Recording`: a column scan finds the turns, rows are decoded
    when their turn is replayed."""
    conn, close = _open_snapshot(path)
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
        raise UsageError(f"{path} is not a readable database: {short_reason(exc)}") from exc
    except BaseException:
        close()
        raise
    try:
        slugs = _generator_slugs(conn, path, warn)
    except BaseException:  # an interrupt: still remove the private copy
        close()
        raise

    def rows(after: int = -1, before: int | None = None) -> Iterator[Step]:
        return _step_rows(conn, path, columns, warn, after=after, before=before)

    def model_of(body: Sequence[Step]) -> str:
        for step in reversed(body):
            slug = slugs.get(step.execution_id)
            if slug:
                return slug
        return DEFAULT_MODEL

    def load_turn(position: int) -> TurnInput:
        if not users:
            body = list(rows())
            return TurnInput(user=None, batches=[body], model=model_of(body))
        start = users[position]
        end = users[position + 1] if position + 1 < len(users) else None
        steps = list(rows(after=start - 1, before=end))
        user = steps[0] if steps and steps[0].index == start else None
        body = steps[1:] if user is not None else steps
        return TurnInput(user=user, batches=[body], model=model_of(body))

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


def decode_row(row: StepRow) -> Step:
    """A `steps` row decoded with all its columns. Raises `DecodeError` as `decode_step_row`."""
    return decode_step_row(
        row.index,
        row.step_type,
        row.status,
        row.payload,
        metadata=row.metadata,
        error_details=row.error_details,
    )


def _step_rows(
    conn: sqlite3.Connection,
    path: str,
    columns: Sequence[str],
    warn: Warn,
    *,
    after: int = -1,
    before: int | None = None,
) -> Iterator[Step]:
    """The steps after `after` (and before `before`), decoded; a bad row is one warning."""
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
                    warn(f"steps after {last}: not read, {short_reason(exc)}")
                    return
                warn(f"step {bad}: skipped, {short_reason(exc)}")
                position = bad
                break
            last = row.index
            step = guarded_decode(f"step {row.index}", functools.partial(decode_row, row), warn)
            if step is not None:
                yield step


def _has_side_files(path: str) -> bool:
    return any(os.path.lexists(path + suffix) for suffix in ("-wal", "-shm", "-journal"))


def _private_copy(path: str) -> tuple[str, str]:
    """Copy the database and its -wal (never the -shm: SQLite rebuilds it from the -wal) into a
    private folder; returns (folder, the copy's path). The originals are only read."""
    # Named after this process: a replay killed outright leaves it to the next host's sweep.
    folder = make_owned_folder("replay")
    copy = os.path.join(folder, "conversation.db")
    try:
        for suffix in ("", "-wal"):
            if suffix and not os.path.lexists(path + suffix):
                continue
            with open_regular(path + suffix) as source, open(copy + suffix, "wb") as target:
                shutil.copyfileobj(source, target, CHUNK_BYTES)
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
        raise UsageError(f"{path} is not a readable database: {short_reason(exc)}") from exc


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
                warn(f"gen_metadata {idx}: skipped, {short_reason(exc)}")
                continue
            if slug:
                slugs[execution] = slug
    # A malformed table or a non-integer idx (database.py reads it with int()) costs only the
    # model names: replay goes on with the default.
    except (DatabaseError, sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
        warn(f"gen_metadata: not read further, {short_reason(exc)}")
    return slugs
