"""The sqlite event source: watch agy's conversation database and yield changed Step snapshots.

Wakes on file-change notifications (inotify on the database's folder), with a
`PRAGMA data_version` tick as the fallback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agy_provider.agy.database import data_version
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.database import read_snapshot
from agy_provider.agy.database import read_step_rows
from agy_provider.agy.database import scan_step_signatures
from agy_provider.agy.growing_text import GrowingTexts
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import STATUS_BY_NUMBER
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepStatus
from agy_provider.errors import DatabaseError
from agy_provider.errors import DecodeError
from agy_provider.errors import SourceError
from agy_provider.hookspecs import hookimpl
from agy_provider.live.fswatch import FolderWatch
from agy_provider.live.fswatch import watch_folder
from agy_provider.workers import off_loop

if TYPE_CHECKING:
    from agy_provider.contract.sources import RegisterEventSource
    from agy_provider.contract.turn import TurnContext

__all__ = ["SqliteEventSource", "register_event_sources"]

log = logging.getLogger(__name__)

# Fallback ticks (seconds): fast right after a change, backing off while nothing moves. With
# inotify they only cover missed notifications; without it they are the whole mechanism.
TICK_ACTIVE = 0.05
TICK_IDLE = 0.5
TICK_ACTIVE_NO_NOTIFY = 0.01
TICK_IDLE_NO_NOTIFY = 0.25
# A notification on `-wal` fires when agy writes a commit's frames, a moment *before* the commit
# is published in the WAL index (`-shm`, written through mmap, which notifies nothing). So after
# a notification we re-check every SETTLE_TICK until data_version moves, for at most SETTLE_WINDOW.
SETTLE_TICK = 0.002
SETTLE_WINDOW = 0.05
# Files' modification times are coarse (a commit in the same tick as our look, same size, is
# invisible to stat): a real read runs at least this often whatever the files say.
RECHECK_EVERY = 0.5
# How long opening may wait out a database agy holds locked.
OPEN_TIMEOUT = 10.0


def _file_signature(path: Path) -> tuple[int, ...]:
    """Sizes and modification times of the database and its `-wal` (-1 when absent)."""
    signature: list[int] = []
    for name in (str(path), f"{path}-wal"):
        try:
            info = os.stat(name)
        except OSError:
            signature += [-1, -1]
        else:
            signature += [info.st_size, info.st_mtime_ns]
    return tuple(signature)


@hookimpl
def register_event_sources(register: RegisterEventSource) -> None:
    register("sqlite", SqliteEventSource.for_turn, database=True)


class SqliteEventSource:
    """One turn's reader of one conversation database (one read-only connection).

    `poll()` returns the snapshots that changed since the last call: after `data_version` moved it
    reads rows past the highest one seen plus the rows that were not final, fetching a payload only
    when a light column scan shows the row changed. It never moves past a row that can still change.
    """

    name = "sqlite"
    deciding = 0  # this source never asks anyone anything

    def __init__(self, path: Path, *, min_index: int = -1) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._max_seen = min_index
        self._pending: dict[int, tuple[int, int, int]] = {}  # non-final idx -> light signature
        # Non-final rows' strings as last decoded: a row rewritten with a longer answer decodes
        # only what grew (the blob itself still comes whole from SQLite).
        self._texts: dict[int, GrowingTexts] = {}
        self._inflight: asyncio.Future[list[Step]] | None = None
        self._seen_files: tuple[int, ...] | None = None  # file signature at the last read
        self._read_at = 0.0  # when the last real read ran (monotonic)
        self._unclaimed: list[Step] = []  # what a cancelled poll's read took, for the next poll
        self._watch: FolderWatch | None = None
        self._idle_ticks = 0
        self._settle_until = 0.0
        self.skipped: list[tuple[int, str]] = []
        # (rows the light scan returned, payloads fetched) by the last read, and the UTF-8 bytes
        # of growing texts decoded so far: tests hold the reader to "cost follows what changed".
        self.last_read = (0, 0)
        self.text_bytes_decoded = 0

    @classmethod
    def for_turn(cls, turn: TurnContext) -> SqliteEventSource:
        if turn.binding is None:  # the core makes sources once agy's database is bound
            raise SourceError("the sqlite event source needs the turn's database, not bound yet")
        return cls(Path(turn.binding.path), min_index=turn.min_index)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OPEN_TIMEOUT
        while True:
            try:
                self._conn = await off_loop(open_conversation_db, self.path)
                break
            except DatabaseError:
                # agy may hold the database exclusively for a moment: wait it out, bounded.
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(TICK_ACTIVE)
        # Without notifications the data_version tick alone keeps us correct, just slower.
        stem = self.path.stem
        self._watch = await watch_folder(self.path.parent, lambda name: name.startswith(stem))

    async def aclose(self) -> None:
        if self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight])  # never close the connection under a read
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        conn, self._conn = self._conn, None
        if conn is not None:
            await off_loop(conn.close)  # releases SQLite's shared-memory locks: not on the loop

    async def cancel(self) -> None:
        """Nothing to tell agy through a database: the runner stops the process."""

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def wait(self, timeout: float) -> None:
        """Sleep until the database may have changed, at most `timeout` (and one fallback tick)."""
        if time.monotonic() < self._settle_until:
            await asyncio.sleep(min(timeout, SETTLE_TICK))
            return
        notify = self._watch is not None
        active = TICK_ACTIVE if notify else TICK_ACTIVE_NO_NOTIFY
        idle = TICK_IDLE if notify else TICK_IDLE_NO_NOTIFY
        tick = min(idle, active * (2 ** min(self._idle_ticks, 8)))
        delay = max(0.0, min(timeout, tick))
        if self._watch is not None:
            if await self._watch.wait(delay):
                self._settle_until = time.monotonic() + SETTLE_WINDOW
        else:
            await asyncio.sleep(delay)

    # -- reading -----------------------------------------------------------------------------

    async def poll(self, *, force: bool = False) -> list[Step]:
        """Changed snapshots since the last poll; [] while nothing moved or the database is busy.

        Whether anything moved is one cheap pragma on the loop; the read and the decoding run in
        a worker thread, so a large change never stalls the caller's event loop. A cancelled
        poll lets its thread finish; `aclose` waits for it.
        """
        if self._conn is None:
            raise RuntimeError("poll() before open()")
        if self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight])  # one read at a time on one connection
        if not force and not self._unclaimed and not self._moved():
            return []  # nothing committed since the last read: no thread hop at all
        self._inflight = inflight = asyncio.ensure_future(off_loop(self.read, force=force))
        try:
            fresh = await asyncio.shield(inflight)
        except asyncio.CancelledError:
            # The read moved past the rows it took: the next poll hands them over.
            inflight.add_done_callback(self._keep_unclaimed)
            raise
        kept, self._unclaimed = self._unclaimed, []
        if not kept:
            return fresh
        newest = {step.index: step for step in [*kept, *fresh]}
        return [newest[index] for index in sorted(newest)]

    def _moved(self) -> bool:
        """Whether agy may have committed since the last read, from the files alone.

        A commit rewrites the `-wal` (or, outside WAL, the database), so unchanged sizes and
        modification times mean nothing moved (modification times are coarse, so a real read
        still happens every `RECHECK_EVERY`): a `stat`, which never waits on SQLite's locks
        (even `PRAGMA data_version` can spin on the WAL's read locks), so it runs on the loop
        and the many idle checks of many turns cost no thread hop. Right after a notification
        the commit may not be published yet (`SETTLE_WINDOW`): then the read decides.
        """
        now = time.monotonic()
        if now < self._settle_until or now - self._read_at >= RECHECK_EVERY:
            return True
        if _file_signature(self.path) != self._seen_files:
            return True
        self._idle_ticks += 1
        return False

    def _keep_unclaimed(self, read: asyncio.Future[list[Step]]) -> None:
        if not read.cancelled() and read.exception() is None:
            self._unclaimed.extend(read.result())

    def read(self, *, force: bool = False) -> list[Step]:
        """`poll` without the thread hop (for callers already off the event loop)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("read() before open()")
        self._read_at = time.monotonic()
        try:
            files = _file_signature(self.path)
            version = data_version(conn)
            if version == self._data_version and not force:
                if time.monotonic() >= self._settle_until:
                    self._idle_ticks += 1  # settling after a notification is not idleness
                return []
            self._settle_until = 0.0  # the notified commit is visible now
            changed = self._read_changes(conn)
        except sqlite3.OperationalError as exc:
            # Locked or busy: agy holds a write lock. Try again next tick, nothing is lost.
            log.debug("%s busy (%s); next tick", self.path, exc)
            return []
        except sqlite3.DatabaseError as exc:
            raise DatabaseError(
                f"reading agy's database failed: {exc}", path=str(self.path)
            ) from exc
        self._data_version = version
        # What the files looked like before this read: if they change again, read again.
        self._seen_files = files
        self._idle_ticks = 0 if changed else self._idle_ticks + 1
        return changed

    def _read_changes(self, conn: sqlite3.Connection) -> list[Step]:
        """One read transaction: a light scan, then payloads of the rows that changed."""
        with read_snapshot(conn):
            light = scan_step_signatures(conn, after=self._max_seen, also=sorted(self._pending))
            wanted = [row[0] for row in light if self._pending.get(row[0]) != row[1:]]
            rows = read_step_rows(conn, wanted)
        self.last_read = (len(light), len(rows))
        steps: list[Step] = []
        for row in rows:
            idx, status = row.index, row.status
            self._max_seen = max(self._max_seen, idx)
            signature = (row.step_type, status, len(row.payload) if row.payload else 0)
            texts = self._texts.get(idx) or self._texts.setdefault(idx, GrowingTexts())
            decoded = texts.decoded
            try:
                step = decode_step_row(
                    idx,
                    row.step_type,
                    status,
                    row.payload,
                    metadata=row.metadata,
                    error_details=row.error_details,
                    texts=texts,
                )
            except DecodeError as exc:
                reason = str(exc)
                if (idx, reason) not in self.skipped:
                    self.skipped.append((idx, reason))
                    log.warning("%s step %d skipped: %s", self.path, idx, reason)
                # A corrupt row in a terminal state will not be rewritten: stop re-reading it.
                if STATUS_BY_NUMBER.get(status, StepStatus.UNSPECIFIED).terminal:
                    self._pending.pop(idx, None)
                    self._texts.pop(idx, None)
                else:
                    self._pending[idx] = signature
                continue
            finally:
                self.text_bytes_decoded += texts.decoded - decoded
            if step.final:
                self._pending.pop(idx, None)
                self._texts.pop(idx, None)
            else:
                self._pending[idx] = signature
            steps.append(step)
        return steps

    def last_final_index(self, after: int = -1) -> int:
        """The highest index below which every row seen past `after` is final (what a session
        may record); rows at or before `after` (earlier turns') never hold it back."""
        return min([self._max_seen, *[i - 1 for i in self._pending if i > after]])
