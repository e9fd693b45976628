"""The one place that opens agy's conversation database, read-only, and reads rows from it.

Never writes: a `file:…?mode=ro` URI plus `PRAGMA query_only=1`; `immutable=1` only as AGY-FORMATS §3.2 allows.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agy_provider.errors import DatabaseError

__all__ = [
    "BLOB_READ_BYTES",
    "STEP_COLUMNS",
    "StepRow",
    "data_version",
    "first_step_index",
    "iter_generator_rows",
    "iter_step_rows",
    "last_step_index",
    "newest_checkpoint_rows",
    "newest_generator_rows",
    "newest_step_index",
    "next_step_index",
    "open_conversation_db",
    "read_conversation_id",
    "read_snapshot",
    "read_step_rows",
    "scan_step_signatures",
    "step_columns",
    "user_step_indices",
]

# The columns we know (newer builds add some: select by name, never `*`).
STEP_COLUMNS = ("idx", "step_type", "status", "metadata", "error_details", "step_payload")
# A payload this large is read through a blob handle (one copy instead of two; issue 31).
BLOB_READ_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class StepRow:
    index: int
    step_type: int
    status: int
    metadata: bytes | None
    error_details: bytes | None
    payload: bytes | None


def _uri(path: str, mode: str) -> str:
    quoted = urllib.parse.quote(os.path.abspath(path))
    return f"file:{quoted}?{mode}"


def open_conversation_db(
    path: str | os.PathLike[str], *, timeout: float = 0.0, snapshot: bool = False
) -> sqlite3.Connection:
    """Open agy's database read-only. Raises `DatabaseError` if it cannot be opened or is not agy's.

    A cleanly closed WAL database with no `-wal` file can refuse a read-only open on some SQLite
    builds (no `-shm` can be made); only then, with no writer possible, fall back to `immutable=1`.
    `snapshot=True` (offline replay) reads such a closed database with `immutable=1` at once, so
    not even SQLite's `-wal`/`-shm` side files appear beside a file someone asked us to read.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatabaseError("no such database file", path=path)
    if snapshot and not os.path.exists(path + "-wal"):
        return _checked(_open_immutable(path), path)
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            _uri(path, "mode=ro"), uri=True, timeout=timeout, check_same_thread=False
        )
        _configure(conn)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: a schema not in UTF-8
        if conn is not None:
            # Closed now: a connection is in a reference cycle (its statement cache), so one
            # dropped open keeps the file open until the garbage collector runs.
            conn.close()
        if os.path.exists(path + "-wal"):
            raise DatabaseError(f"cannot open read-only: {exc}", path=path) from exc
        conn = _open_immutable(path)
    return _checked(conn, path)


def _open_immutable(path: str) -> sqlite3.Connection:
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(_uri(path, "immutable=1"), uri=True, check_same_thread=False)
        _configure(conn)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except (sqlite3.DatabaseError, ValueError) as exc:
        if conn is not None:
            conn.close()
        raise DatabaseError(f"not a readable SQLite database: {exc}", path=path) from exc
    return conn


def _configure(conn: sqlite3.Connection) -> None:
    """Read-only twice over, and text that is not UTF-8 read with U+FFFD (one odd cell must
    not end a whole scan)."""
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    conn.execute("PRAGMA query_only=1")


def _checked(conn: sqlite3.Connection, path: str) -> sqlite3.Connection:
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except (sqlite3.DatabaseError, ValueError) as exc:
        conn.close()
        raise DatabaseError(f"not a readable SQLite database: {exc}", path=path) from exc
    tables = {row[0] for row in rows}
    if "steps" not in tables:
        conn.close()
        raise DatabaseError("not an agy conversation database (no steps table)", path=path)
    return conn


def step_columns(conn: sqlite3.Connection) -> list[str]:
    """The columns of `steps` we know that this database has (newer builds add others)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(steps)")}
    return [c for c in STEP_COLUMNS if c in have]


def iter_step_rows(
    conn: sqlite3.Connection,
    *,
    path: str = "",
    after: int = -1,
    before: int | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[StepRow]:
    """Every `steps` row with `after < idx < before`, in index order.

    Pass `columns` (from `step_columns`) when reading one database many times.
    """
    columns = list(columns) if columns is not None else step_columns(conn)
    if "idx" not in columns or "step_payload" not in columns:
        raise DatabaseError("steps table lacks idx or step_payload", path=path)
    select = ", ".join(columns)
    try:
        upper = before if before is not None else 2**63 - 1
        cursor = conn.execute(
            f"SELECT {select} FROM steps WHERE typeof(idx) = 'integer' AND idx > ? AND idx < ? "
            "ORDER BY idx",
            (after, upper),
        )
        if columns == list(STEP_COLUMNS):  # the usual case: unpack without a dict per row
            for idx, step_type, status, metadata, error_details, payload in cursor:
                yield StepRow(
                    int(idx),
                    _int(step_type),
                    _int(status),
                    _blob(metadata),
                    _blob(error_details),
                    _blob(payload),
                )
            return
        for values in cursor:
            row = dict(zip(columns, values, strict=True))
            yield StepRow(
                index=int(row["idx"]),
                step_type=_int(row.get("step_type")),
                status=_int(row.get("status")),
                metadata=_blob(row.get("metadata")),
                error_details=_blob(row.get("error_details")),
                payload=_blob(row.get("step_payload")),
            )
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"reading steps failed: {exc}", path=path) from exc


def data_version(conn: sqlite3.Connection) -> int:
    """`PRAGMA data_version`: moves only when *another* connection committed (agy wrote)."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


@contextlib.contextmanager
def read_snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One explicit read transaction: every query inside sees the same committed state."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def user_step_indices(conn: sqlite3.Connection) -> list[int]:
    """Indices of the USER_INPUT rows (type 14), in order: where replay splits turns.

    Only integer indexes are rows of agy's (a hostile file may store anything in a column).
    """
    cursor = conn.execute(
        "SELECT idx FROM steps WHERE step_type = 14 AND typeof(idx) = 'integer' ORDER BY idx"
    )
    return [row[0] for row in cursor]


def first_step_index(conn: sqlite3.Connection) -> Any:
    """The lowest idx in `steps` (None when empty), as stored."""
    return conn.execute("SELECT MIN(idx) FROM steps").fetchone()[0]


def next_step_index(conn: sqlite3.Connection, after: Any, before: int | None = None) -> Any:
    """The idx of the first row past `after` and below `before`, as stored, or None."""
    row = conn.execute(
        "SELECT idx FROM steps WHERE idx > ? AND idx < ? ORDER BY idx LIMIT 1",
        (after, before if before is not None else 2**63 - 1),
    ).fetchone()
    return None if row is None else row[0]


def newest_checkpoint_rows(conn: sqlite3.Connection, limit: int = 3) -> list[tuple[Any, ...]]:
    """`(idx, step_type, status, step_payload)` of the newest CHECKPOINT rows (type 23)."""
    return conn.execute(
        "SELECT idx, step_type, status, step_payload FROM steps WHERE step_type = 23 "
        "AND typeof(idx) = 'integer' AND typeof(status) = 'integer' ORDER BY idx DESC LIMIT ?",
        (limit,),
    ).fetchall()


def scan_step_signatures(
    conn: sqlite3.Connection, *, after: int, also: Sequence[int] = ()
) -> list[tuple[int, int, int, int]]:
    """The light scan agy itself uses to see what changed: `(idx, step_type, status, payload
    length)` of rows past `after` and of the rows in `also` (ones that may still change).

    No payload is read, so its cost follows the number of rows returned, not their size.
    """
    marks = ",".join("?" * len(also))
    where = "typeof(idx) = 'integer' AND (idx > ?" + (f" OR idx IN ({marks})" if also else "") + ")"
    rows = conn.execute(
        f"SELECT idx, step_type, status, length(step_payload) FROM steps WHERE {where}",
        (after, *also),
    ).fetchall()
    return [(int(i), _int(t), _int(s), _int(n)) for i, t, s, n in rows]


def last_step_index(path: str | os.PathLike[str]) -> int:
    """The newest step index in the conversation database at `path` (-1 when it has none)."""
    conn = open_conversation_db(path)
    try:
        rows = scan_step_signatures(conn, after=-1)
    finally:
        conn.close()
    return max((row[0] for row in rows), default=-1)


def newest_step_index(path: str | os.PathLike[str]) -> int:
    """The newest step index at `path` in one lookup (`idx` is the table's integer primary key:
    SQLite reads its largest at once), -1 when it has none. Raises `DatabaseError`."""
    conn = open_conversation_db(path)
    try:
        newest = conn.execute("SELECT max(idx) FROM steps").fetchone()[0]
    except (sqlite3.DatabaseError, ValueError) as exc:
        raise DatabaseError(f"cannot read the newest step: {exc}", path=os.fspath(path)) from exc
    finally:
        conn.close()
    if newest is None:
        return -1
    if isinstance(newest, int):
        return newest
    return last_step_index(path)  # an odd, non-integer idx: only integer ones are steps


def read_step_rows(conn: sqlite3.Connection, indices: Sequence[int]) -> list[StepRow]:
    """The full rows with these indices, in index order (the columns of `STEP_COLUMNS`).

    Call it inside one read transaction (`read_snapshot`): a payload of `BLOB_READ_BYTES` or more
    is read through an incremental blob handle of that same transaction (see `_large_payload`).
    """
    if not indices:
        return []
    marks = ",".join("?" * len(indices))
    # A large blob's value is left out of the row (SQLite reads `typeof` and `length` from the
    # record header without loading the value) and read apart; every other payload as it is.
    large = "typeof(step_payload) = 'blob' AND length(step_payload) >= ?"
    try:
        found = conn.execute(
            "SELECT idx, step_type, status, metadata, error_details, "
            f"CASE WHEN {large} THEN NULL ELSE step_payload END, "
            f"CASE WHEN {large} THEN rowid END, length(step_payload) "
            f"FROM steps WHERE typeof(idx) = 'integer' AND idx IN ({marks}) ORDER BY idx",
            (BLOB_READ_BYTES, BLOB_READ_BYTES, *indices),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "rowid" not in str(exc):
            raise  # busy or locked: the caller's to handle, as for any read
        # A table without rowids (not agy's schema) has no blob handles: every payload whole.
        found = conn.execute(
            "SELECT idx, step_type, status, metadata, error_details, step_payload, NULL, NULL "
            f"FROM steps WHERE typeof(idx) = 'integer' AND idx IN ({marks}) ORDER BY idx",
            tuple(indices),
        ).fetchall()
    return [
        StepRow(
            int(idx),
            _int(t),
            _int(s),
            _blob(m),
            _blob(e),
            _blob(p) if rowid is None else _large_payload(conn, int(idx), rowid, size),
        )
        for idx, t, s, m, e, p, rowid, size in found
    ]


def _large_payload(conn: sqlite3.Connection, index: int, rowid: int, size: int) -> bytes | None:
    """Row `rowid`'s payload of `size` bytes through an incremental blob handle.

    A `SELECT` hands a blob over twice (SQLite copies it into a value of its own, Python copies
    that into `bytes`: each copy a fresh block of megabytes for a growing answer's row, once per
    delta); `blob.read()` copies SQLite's pages once, straight into the `bytes`. Inside the
    caller's read transaction the handle sees the row the `SELECT` saw; should anything differ
    (a size that does not match, a table without rowids), the row is selected as before.
    """
    try:
        with conn.blobopen("steps", "step_payload", rowid, readonly=True) as blob:
            if len(blob) == size:
                return blob.read()
    except sqlite3.Error:
        pass
    row = conn.execute(
        "SELECT step_payload FROM steps WHERE typeof(idx) = 'integer' AND idx = ?", (index,)
    ).fetchone()
    return None if row is None else _blob(row[0])


def iter_generator_rows(conn: sqlite3.Connection, *, path: str = "") -> Iterator[tuple[int, bytes]]:
    """`gen_metadata` rows (index, data), when the table exists."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "gen_metadata" not in tables:
            return
        for idx, data in conn.execute(
            "SELECT idx, data FROM gen_metadata WHERE typeof(idx) = 'integer' ORDER BY idx"
        ):
            blob = _blob(data)
            if blob:
                yield int(idx), blob
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"reading gen_metadata failed: {exc}", path=path) from exc


def newest_generator_rows(
    conn: sqlite3.Connection, *, path: str = ""
) -> Iterator[tuple[int, bytes]]:
    """`gen_metadata` rows newest first (a caller stops at the turn it wants, so a long
    conversation costs only its last model calls)."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "gen_metadata" not in tables:
            return
        cursor = conn.execute(
            "SELECT idx, data FROM gen_metadata WHERE typeof(idx) = 'integer' ORDER BY idx DESC"
        )
        for idx, data in cursor:
            blob = _blob(data)
            if blob and isinstance(idx, int):
                yield idx, blob
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"reading gen_metadata failed: {exc}", path=path) from exc


def read_conversation_id(conn: sqlite3.Connection) -> str:
    """`trajectory_meta.cascade_id` of the CLI's main trajectory, or "" when absent."""
    try:
        rows = conn.execute(
            "SELECT cascade_id, trajectory_type FROM trajectory_meta ORDER BY trajectory_type = 4 DESC"
        ).fetchall()
    except sqlite3.DatabaseError:
        return ""
    return str(rows[0][0] or "") if rows else ""


def _int(value: object) -> int:
    """An integer column as agy writes it; anything else (NULL, text, real) reads as 0."""
    return value if isinstance(value, int) else 0


def _blob(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return None
