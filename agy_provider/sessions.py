"""Host session id → agy conversation, in one JSON store shared safely by many processes.

Each update locks, re-reads, merges one record and replaces the file atomically (`atomic.py`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agy_provider.atomic import file_lock, read_json, write_json_atomic

__all__ = [
    "SESSIONS_ENV",
    "SessionRecord",
    "SessionStore",
    "default_store_path",
    "valid_conversation_id",
]

log = logging.getLogger(__name__)

SESSIONS_ENV = "AGY_PROVIDER_SESSIONS"

# agy's conversation ids are UUIDs; anything that could become a flag is refused (AGY-FORMATS §2).
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def valid_conversation_id(value: str) -> bool:
    """True for an id safe to pass as `--conversation <id>`."""
    return bool(_CONVERSATION_ID.fullmatch(value))


@dataclasses.dataclass(frozen=True, slots=True)
class SessionRecord:
    """What we remember of a host session: its agy conversation and how far we have read it.

    `history_digest` fingerprints the conversation as the host will next present it, so a turn can
    tell whether the host's history still matches what agy holds.
    """

    conversation_id: str
    last_step_index: int = -1
    event_source: str = ""
    agy_version: str = ""
    history_digest: str = ""
    updated_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        )


def default_store_path() -> Path:
    """`$AGY_PROVIDER_SESSIONS`, else `$XDG_STATE_HOME/agy-provider/sessions.json`."""
    explicit = os.environ.get(SESSIONS_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "agy-provider" / "sessions.json"


class SessionStore:
    """The store at `path`. Reads never lock; writes lock, merge and replace atomically."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_store_path()

    def _load(self) -> dict[str, SessionRecord]:
        try:
            data = read_json(self.path)
        except ValueError as exc:
            # Only a foreign writer could leave this (ours are atomic): keep going without it.
            log.warning("session store %s is not JSON (%s); starting empty", self.path, exc)
            return {}
        if data is None:
            return {}
        sessions = data.get("sessions") if isinstance(data, dict) else None
        if not isinstance(sessions, dict):
            log.warning("session store %s has no sessions object; starting empty", self.path)
            return {}
        records: dict[str, SessionRecord] = {}
        for key, value in sessions.items():
            try:
                records[str(key)] = SessionRecord.from_json(value)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("session store %s: session %r dropped: %s", self.path, key, exc)
        return records

    def get(self, session_id: str) -> SessionRecord | None:
        return self._load().get(session_id)

    def all(self) -> Mapping[str, SessionRecord]:
        return self._load()

    def put(self, session_id: str, record: SessionRecord) -> None:
        """Store `record` under `session_id`, keeping every other process's records."""
        record = dataclasses.replace(record, updated_at=time.time())
        with file_lock(self.path):
            records = self._load()
            records[session_id] = record
            self._write(records)

    def delete(self, session_id: str) -> None:
        with file_lock(self.path):
            records = self._load()
            if records.pop(session_id, None) is not None:
                self._write(records)

    def _write(self, records: Mapping[str, SessionRecord]) -> None:
        write_json_atomic(
            self.path,
            {"version": 1, "sessions": {k: v.to_json() for k, v in sorted(records.items())}},
        )
