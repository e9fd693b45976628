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
from typing import Any
from typing import Final

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


RowKey = tuple[int, int, "bytes | None"]  # (step_type, status, step_payload) of one row
_USER_INPUT_TYPE: Final = 14  # `step_type` columns (field guide §3.3): a user's turn,
_CHECKPOINT_TYPE: Final = 23  # and a checkpoint (its user intent is the title)


class ConversationSteps:
    """Steps of one conversation database, by row index, refreshed on commits, rendered on use.

    One long-lived read-only connection (`mode=ro`, `query_only`); `refresh()` skips all reads while
    `PRAGMA data_version` stands still and keeps the last good snapshot when the database is
    missing, locked or busy. A resumed conversation of 10,000 rows must be served at once, as agy
    serves it from memory: rendering a row costs ~40 µs here, so rows render when a method first
    needs them and stay rendered until they change, and after the first read only the current
    turn's rows (from its user input on) are read again; earlier turns' rows never change. Rows
    that do not decode are left out and logged once each.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._rows: dict[int, RowKey] = {}
        self._conn: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._reread_from = 0  # rows before this (earlier turns) are not read again
        self._bad_rows: set[tuple[int, str]] = set()
        self._bad: set[int] = set()
        self._rendered: dict[int, tuple[RowKey, dict[str, Any]]] = {}

    def close(self) -> None:
        """Close the connection; `refresh()` reopens it and reads every row again."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._data_version = None
            self._reread_from = 0

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the database if another connection committed since the last read.

        Returns True when a row changed. Never raises for database trouble: a missing, locked or
        half-created database leaves the snapshot as it was.
        """
        conn = self._connection()
        if conn is None:
            return False
        start = self._reread_from
        try:
            version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version and not force:
                return False
            rows = self._read_rows(conn, start)
        except sqlite3.Error as exc:
            start = 0
            fallback = self._read_immutable(exc)
            if fallback is None:
                return False
            rows = fallback
            version = -1  # an immutable read proves nothing about later commits: read next time
        self._data_version = version
        return self._replace(rows, start)

    def __len__(self) -> int:
        return len(self._rows) - len(self._bad)

    def indices(self) -> list[int]:
        """Every row's index in order, less the rows known not to decode."""
        return [i for i in sorted(self._rows) if i not in self._bad]

    def version(self, index: int) -> RowKey | None:
        """What row `index` holds now: the same object for as long as the row is unchanged."""
        return self._rows.get(index)

    def get(self, index: int) -> dict[str, Any] | None:
        """Row `index` rendered as agy's RPC does; None when absent or it does not decode."""
        key = self._rows.get(index)
        if key is None or index in self._bad:
            return None
        cached = self._rendered.get(index)
        if cached is not None and (cached[0] is key or cached[0] == key):
            return cached[1]
        step_type, status, payload = key
        try:
            step = render_step(payload, step_type, status)
        except ValueError as exc:
            self._bad.add(index)
            self._log_bad_row(index, payload, exc)
            return None
        self._rendered[index] = (key, step)
        return step

    def rendered(self, indices: list[int] | None = None) -> list[tuple[int, dict[str, Any]]]:
        """(index, step) of `indices` (default: every row) that decode, in order."""
        pairs = []
        for index in self.indices() if indices is None else indices:
            step = self.get(index)
            if step is not None:
                pairs.append((index, step))
        return pairs

    def title(self) -> str:
        """The conversation title: the latest checkpoint's user intent, first line (field guide
        §3.3: it may be "title\\n\\nnarration")."""
        for index in reversed(self.indices()):
            if self._rows[index][0] != _CHECKPOINT_TYPE:
                continue  # told by the column: only checkpoints are rendered here
            step = self.get(index)
            if step is not None and step.get("type") == STEP_TYPE_CHECKPOINT:
                intent = step.get("checkpoint", {}).get("userIntent", "")
                if isinstance(intent, str) and intent.strip():
                    return intent.strip().split("\n", 1)[0]
        return ""

    def last_user_input_index(self) -> int:
        """Index of the latest USER_INPUT step, 0 when there is none."""
        found = [i for i, key in self._rows.items() if key[0] == _USER_INPUT_TYPE]
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
    def _read_rows(
        conn: sqlite3.Connection, start: int = 0
    ) -> list[tuple[int, int, int, bytes | None]]:
        conn.execute("BEGIN")
        try:
            cursor = conn.execute(
                "SELECT idx, step_type, status, step_payload FROM steps WHERE idx >= ? "
                "ORDER BY idx",
                (start,),
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

    def _replace(self, rows: list[tuple[int, int, int, bytes | None]], start: int) -> bool:
        """Take the rows read from index `start` on; the rows before it stay as they were."""
        old = self._rows
        kept = {i: key for i, key in old.items() if i < start}
        changed = len(kept) + len(rows) != len(old)
        for index, step_type, status, payload in rows:
            key = (step_type, status, payload)
            previous = old.get(index)
            if previous is not None and previous == key:
                key = previous  # unchanged: the same object, so identity answers comparisons
            else:
                changed = True
                self._bad.discard(index)
            kept[index] = key
        self._rows = kept
        for index in [i for i in self._rendered if i not in kept]:
            del self._rendered[index]
        self._bad &= kept.keys()
        users = [i for i, key in kept.items() if key[0] == _USER_INPUT_TYPE]
        self._reread_from = max(users, default=0)  # the current turn, from its user input on
        return changed

    def _log_bad_row(self, index: int, payload: bytes | None, exc: ValueError) -> None:
        digest = hashlib.sha1(payload or b"", usedforsecurity=False).hexdigest()
        if (index, digest) not in self._bad_rows:
            self._bad_rows.add((index, digest))
            _log.warning("skipping step row %d of %s: %s", index, self.db_path, exc)
