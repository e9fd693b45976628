"""The simulator's conversation database writer: agy's 7-table schema in WAL mode.

Owns `ConversationWriter`, the only code that writes a simulated conversation database.

Every call is one commit (its own transaction), as agy's writes are; `bulk()` groups many calls in
one transaction for tests and benchmarks that need 10,000 rows fast. Rows are appended with
contiguous 0-based `idx` and rewritten in place; the `step_type`/`status` columns mirror payload
fields 1/4, the `metadata` column stays NULL (agy's often is) and each payload's 5.20 names its
own trajectory, index and cascade.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agy_provider.errors import DatabaseError
from agy_provider.sim import descriptors as pb

__all__ = ["SCHEMA", "ConversationWriter"]

# AGY-FORMATS §3.1 (identical on agy 1.1.9, 1.1.16, 1.1.23).
SCHEMA: tuple[str, ...] = (
    "CREATE TABLE steps(idx INTEGER PRIMARY KEY, step_type INTEGER NOT NULL DEFAULT 0, "
    "status INTEGER NOT NULL DEFAULT 0, has_subtrajectory NUMERIC NOT NULL DEFAULT false, "
    "metadata BLOB, error_details BLOB, permissions BLOB, task_details BLOB, render_info BLOB, "
    "step_payload BLOB, step_format INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX idx_steps_status ON steps(status)",
    "CREATE INDEX idx_steps_step_type ON steps(step_type)",
    "CREATE TABLE trajectory_meta(trajectory_id TEXT PRIMARY KEY, cascade_id TEXT, "
    "trajectory_type INTEGER, source INTEGER)",
    "CREATE TABLE gen_metadata(idx INTEGER PRIMARY KEY, data BLOB, size INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE executor_metadata(idx INTEGER PRIMARY KEY, data BLOB)",
    "CREATE TABLE parent_references(idx INTEGER PRIMARY KEY, data BLOB)",
    "CREATE TABLE trajectory_metadata_blob(id TEXT PRIMARY KEY DEFAULT 'main', data BLOB)",
    "CREATE TABLE battle_mode_infos(idx INTEGER PRIMARY KEY, data BLOB)",
)


class ConversationWriter:
    """Writes one conversation database the way agy ≥ 1.1.18 does.

    `path` is the `.db` file (created with the schema when new); `conversation_id` the cascade id.
    `on_commit` runs after every commit (the parent tells the language server "changed").
    `commit_delay` seconds are slept inside every transaction (the "slow commits" fault).
    Raises `DatabaseError` when the file cannot be opened or written.
    """

    def __init__(
        self,
        path: str | Path,
        conversation_id: str,
        *,
        trajectory_id: str = "",
        source: int = pb.TRAJECTORY_SOURCE_CLI,
        parent_conversation_id: str = "",
        created_at: float | None = None,
        commit_delay: float = 0.0,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.conversation_id = conversation_id
        self.commit_delay = commit_delay
        self.on_commit = on_commit
        self._bulk = 0
        new = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            # As Google's runtime opens it (`?mode=rw&_synchronous=NORMAL&_busy_timeout=5000`;
            # under strace it syncs the `-wal` 4 times in a whole conversation): a commit is not
            # synced to disk, only a checkpoint is. FULL would add an fsync to every commit.
            self._db.execute("PRAGMA synchronous=NORMAL")
            if new:
                self._create(
                    trajectory_id or conversation_id, source, parent_conversation_id, created_at
                )
            row = self._db.execute("SELECT trajectory_id FROM trajectory_meta LIMIT 1").fetchone()
            self.trajectory_id: str = row[0] if row else (trajectory_id or conversation_id)
            (count,) = self._db.execute("SELECT COUNT(*) FROM steps").fetchone()
            (gens,) = self._db.execute("SELECT COUNT(*) FROM gen_metadata").fetchone()
        except sqlite3.Error as exc:
            raise DatabaseError(
                f"cannot open conversation database: {exc}", path=str(self.path)
            ) from exc
        self.step_count: int = count
        self.gen_count: int = gens

    # --- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self._bulk:
            yield self._db
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                if self.commit_delay:
                    time.sleep(self.commit_delay)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise DatabaseError(f"write failed: {exc}", path=str(self.path)) from exc
        if self.on_commit is not None:
            self.on_commit()

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """Group every write inside the block in one transaction (one commit at the end)."""
        if self._bulk:
            self._bulk += 1
            try:
                yield
            finally:
                self._bulk -= 1
            return
        with self._transaction():
            self._bulk = 1
            try:
                yield
            finally:
                self._bulk = 0

    def _create(
        self, trajectory_id: str, source: int, parent: str, created_at: float | None
    ) -> None:
        meta = pb.CortexTrajectoryMetadata()
        if created_at is not None:
            meta.created_at.FromNanoseconds(int(created_at * 1e9))
        meta.root_conversation_id = self.conversation_id
        if parent:
            meta.parent_conversation_id = parent
        self._db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            self._db.execute(statement)
        self._db.execute(
            "INSERT INTO trajectory_meta(trajectory_id, cascade_id, trajectory_type, source) "
            "VALUES (?, ?, ?, ?)",
            (trajectory_id, self.conversation_id, pb.TRAJECTORY_TYPE_CASCADE, source),
        )
        self._db.execute(
            "INSERT INTO trajectory_metadata_blob(id, data) VALUES ('main', ?)",
            (meta.SerializeToString(),),
        )
        self._db.execute("COMMIT")

    # --- steps -----------------------------------------------------------------------------

    def _stamp(self, index: int, step: Any) -> None:
        info = step.metadata.source_trajectory_step_info
        info.trajectory_id = self.trajectory_id
        info.step_index = index
        info.cascade_id = self.conversation_id

    def _row(self, step: Any) -> tuple[int, int, bytes | None, bytes]:
        error = step.error.SerializeToString() if step.HasField("error") else None
        # Deterministic: map entries (generic args) in key order, so records are reproducible.
        return step.type, step.status, error, step.SerializeToString(deterministic=True)

    def append(self, step: Any) -> int:
        """Append `step` (a `gemini_coder.Step`) as the next row; returns its index."""
        index = self.step_count
        self._stamp(index, step)
        step_type, status, error, payload = self._row(step)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO steps(idx, step_type, status, error_details, step_payload) "
                "VALUES (?, ?, ?, ?, ?)",
                (index, step_type, status, error, payload),
            )
        self.step_count += 1
        return index

    def update(self, index: int, step: Any) -> None:
        """Rewrite row `index` in place with `step`."""
        self._stamp(index, step)
        step_type, status, error, payload = self._row(step)
        with self._transaction() as db:
            db.execute(
                "UPDATE steps SET step_type=?, status=?, error_details=?, step_payload=? WHERE idx=?",
                (step_type, status, error, payload, index),
            )

    def write_raw(self, index: int, step_type: int, status: int, payload: bytes) -> None:
        """Write row `index` with arbitrary payload bytes (the corrupt-row fault)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO steps(idx, step_type, status, step_payload) VALUES (?, ?, ?, ?)",
                (index, step_type, status, payload),
            )
        self.step_count = max(self.step_count, index + 1)

    def add_generator_metadata(self, record: Any) -> int:
        """Append one `CortexStepGeneratorMetadata` (one model call); returns its index."""
        index = self.gen_count
        data = record.SerializeToString(deterministic=True)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO gen_metadata(idx, data, size) VALUES (?, ?, ?)",
                (index, data, len(data)),
            )
        self.gen_count += 1
        return index

    # --- faults and teardown ---------------------------------------------------------------

    def hold_exclusive(self, seconds: float) -> bool:
        """Hold the database exclusively for `seconds`: new readers see `database is locked`.

        In WAL mode `BEGIN EXCLUSIVE` alone blocks only writers, so the connection also switches to
        exclusive locking mode. That needs every other connection closed: returns False (after a
        plain `BEGIN EXCLUSIVE` window) when a reader holds the file open.
        """
        exclusive = True
        # A reader holding the file open makes the exclusive attempt fail, but only after the
        # busy timeout: wait long enough for a transient reader to close, not the usual 5 s.
        self._db.execute("PRAGMA busy_timeout=100")
        try:
            self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._db.execute("BEGIN EXCLUSIVE")
            # A write makes the exclusive lock real (taken lazily in WAL mode).
            self._db.execute("UPDATE trajectory_metadata_blob SET data=data WHERE id='main'")
        except sqlite3.OperationalError:
            exclusive = False
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            self._db.execute("PRAGMA locking_mode=NORMAL")
            self._db.execute("BEGIN EXCLUSIVE")
        finally:
            self._db.execute("PRAGMA busy_timeout=5000")
        try:
            time.sleep(seconds)
        finally:
            self._db.execute("COMMIT")
            self._db.execute("PRAGMA locking_mode=NORMAL")
            # Leaving exclusive mode takes effect at the next access.
            self._db.execute("SELECT COUNT(*) FROM trajectory_meta").fetchone()
        return exclusive

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (fixtures ship without -wal/-shm)."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self, *, checkpoint: bool = False) -> None:
        """Close; with `checkpoint` the WAL is folded in first (SQLite then removes -wal/-shm)."""
        if checkpoint:
            self.checkpoint()
        self._db.close()
