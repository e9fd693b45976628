"""The simulated language server's view of one conversation database, read-only, as step JSON.

Owns opening agy's database read-only, noticing commits (`PRAGMA data_version`), decoding each row
with our descriptors and rendering it as agy's RPC does (poll shape, and the stream shape).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message

__all__ = [
    "STEP_TYPE_CHECKPOINT",
    "STEP_TYPE_USER_INPUT",
    "ConversationSteps",
    "render_step",
    "stream_shape",
]

_log = logging.getLogger("agy_provider.sim.server")

STEP_TYPE_USER_INPUT: Final = "CORTEX_STEP_TYPE_USER_INPUT"
STEP_TYPE_CHECKPOINT: Final = "CORTEX_STEP_TYPE_CHECKPOINT"
# Payload field numbers that repeat the `step_type` / `status` columns (field guide §3.3, §3.4).
_TYPE_FIELD: Final = 1
_STATUS_FIELD: Final = 4


def _descriptors() -> tuple[type[Message], Any]:
    # Imported late: the descriptors are built at import time and only the server needs them here.
    from agy_provider.sim import descriptors

    step_class: type[Message] = descriptors.Step
    return step_class, descriptors.POOL


def render_step(payload: bytes | None, step_type: int, status: int) -> dict[str, Any]:
    """One `steps` row as agy's RPC renders it: protobuf JSON of the `gemini_coder.Step` payload.

    A row with no payload yet (an empty placeholder) renders from its `step_type`/`status` columns.

    Raises:
        ValueError: the payload is not a valid Step message.
    """
    step_class, pool = _descriptors()
    step = step_class()
    if payload:
        try:
            step.ParseFromString(payload)
        except ProtobufDecodeError as exc:
            raise ValueError(f"step_payload does not parse as gemini_coder.Step: {exc}") from exc
    else:
        fields = step.DESCRIPTOR.fields_by_number
        setattr(step, fields[_TYPE_FIELD].name, step_type)
        setattr(step, fields[_STATUS_FIELD].name, status)
    # Our own pool resolves the Any-wrapped legacy step inside a GENERIC step's result.
    rendered: dict[str, Any] = json_format.MessageToDict(step, descriptor_pool=pool)
    return rendered


def stream_shape(step: dict[str, Any]) -> dict[str, Any]:
    """The step as StreamAgentStateUpdates sends it: agy's stream drops `metadata.toolCall` and
    `plannerResponse.toolCalls` (its poll responses keep them). The real captures show one
    exception, kept here: a GENERIC step keeps its tool call's name, without `argumentsJson`."""
    shaped = copy.deepcopy(step)
    metadata = shaped.get("metadata")
    if isinstance(metadata, dict):
        call = metadata.pop("toolCall", None)
        if shaped.get("type") == "CORTEX_STEP_TYPE_GENERIC" and isinstance(call, dict):
            call.pop("argumentsJson", None)
            metadata["toolCall"] = call
    planner = shaped.get("plannerResponse")
    if isinstance(planner, dict):
        planner.pop("toolCalls", None)
    return shaped


class ConversationSteps:
    """Decoded steps of one conversation database, by row index, refreshed on commits.

    One long-lived read-only connection (`mode=ro`, `query_only`); `refresh()` skips all reads while
    `PRAGMA data_version` stands still, reads every row in one transaction when it moves, and keeps
    the last good snapshot when the database is missing, locked or busy. Rows that do not decode
    are left out and logged once each.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.steps: dict[int, dict[str, Any]] = {}
        self._conn: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._bad_rows: set[tuple[int, str]] = set()
        self._rendered: dict[int, tuple[tuple[int, int, bytes | None], dict[str, Any]]] = {}

    def close(self) -> None:
        """Close the connection; `refresh()` reopens it."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._data_version = None

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the database if another connection committed since the last read.

        Returns True when the snapshot in `steps` changed. Never raises for database trouble: a
        missing, locked or half-created database leaves the snapshot as it was.
        """
        conn = self._connection()
        if conn is None:
            return False
        try:
            version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version and not force:
                return False
            rows = self._read_rows(conn)
        except sqlite3.Error as exc:
            fallback = self._read_immutable(exc)
            if fallback is None:
                return False
            rows = fallback
            version = -1  # an immutable read proves nothing about later commits: read next time
        self._data_version = version
        return self._replace(rows)

    def title(self) -> str:
        """The conversation title: the latest checkpoint's user intent, first line (field guide
        §3.3: it may be "title\\n\\nnarration")."""
        for index in sorted(self.steps, reverse=True):
            step = self.steps[index]
            if step.get("type") == STEP_TYPE_CHECKPOINT:
                intent = step.get("checkpoint", {}).get("userIntent", "")
                if isinstance(intent, str) and intent.strip():
                    return intent.strip().split("\n", 1)[0]
        return ""

    def last_user_input_index(self) -> int:
        """Index of the latest USER_INPUT step, 0 when there is none."""
        found = [i for i, s in self.steps.items() if s.get("type") == STEP_TYPE_USER_INPUT]
        return max(found, default=0)

    def _connection(self) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not self.db_path.exists():
            return None
        uri = f"file:{urllib.parse.quote(str(self.db_path))}?mode=ro"
        try:
            # timeout=0: a locked database must not stall the server's event loop; the next
            # refresh simply tries again.
            conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            conn.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            _log.info("cannot open %s read-only yet: %s", self.db_path, exc)
            return None
        self._conn = conn
        return conn

    @staticmethod
    def _read_rows(conn: sqlite3.Connection) -> list[tuple[int, int, int, bytes | None]]:
        conn.execute("BEGIN")
        try:
            cursor = conn.execute(
                "SELECT idx, step_type, status, step_payload FROM steps ORDER BY idx"
            )
            return [(int(r[0]), int(r[1]), int(r[2]), r[3]) for r in cursor.fetchall()]
        finally:
            conn.execute("COMMIT")

    def _read_immutable(
        self, error: sqlite3.Error
    ) -> list[tuple[int, int, int, bytes | None]] | None:
        # Field guide §3.2: some SQLite builds refuse a read-only open of a cleanly closed WAL
        # database that has no -wal file; only then is an immutable one-shot read safe.
        wal = self.db_path.with_name(self.db_path.name + "-wal")
        if "unable to open" not in str(error) or wal.exists():
            _log.debug("read of %s deferred: %s", self.db_path, error)
            return None
        uri = f"file:{urllib.parse.quote(str(self.db_path))}?mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            try:
                return self._read_rows(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            _log.debug("immutable read of %s failed: %s", self.db_path, exc)
            return None

    def _replace(self, rows: list[tuple[int, int, int, bytes | None]]) -> bool:
        steps: dict[int, dict[str, Any]] = {}
        rendered: dict[int, tuple[tuple[int, int, bytes | None], dict[str, Any]]] = {}
        for index, step_type, status, payload in rows:
            key = (step_type, status, payload)
            cached = self._rendered.get(index)
            if cached is not None and cached[0] == key:
                # Most rows of a long conversation are settled: only rewritten rows re-decode.
                step = cached[1]
            else:
                try:
                    step = render_step(payload, step_type, status)
                except ValueError as exc:
                    self._log_bad_row(index, payload, exc)
                    continue
            steps[index] = step
            rendered[index] = (key, step)
        changed = steps != self.steps
        self.steps = steps
        self._rendered = rendered
        return changed

    def _log_bad_row(self, index: int, payload: bytes | None, exc: ValueError) -> None:
        digest = hashlib.sha1(payload or b"", usedforsecurity=False).hexdigest()
        if (index, digest) not in self._bad_rows:
            self._bad_rows.add((index, digest))
            _log.warning("skipping step row %d of %s: %s", index, self.db_path, exc)
