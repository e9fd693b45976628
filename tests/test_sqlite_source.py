"""The sqlite event source against real databases written by the simulator's writer."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agy_provider.plugins import sqlite_source
from agy_provider.plugins.sqlite_source import SqliteEventSource

from agy_provider.agy import database
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.bulk import write_conversation
from agy_provider.sim.writer import ConversationWriter


async def open_source(path: Path, min_index: int = -1) -> SqliteEventSource:
    source = SqliteEventSource(path, min_index=min_index)
    await source.open()
    return source


@pytest.mark.parametrize("turns", [3, 2500])
async def test_a_tick_after_one_change_reads_only_that_row(tmp_path: Path, turns: int) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=turns, text_size=100)
    placeholder = writer.append(planner_step("", ""))  # agy's empty placeholder row
    source = await open_source(db)
    first = await source.poll()
    assert len(first) == turns * STEPS_PER_TURN + 1
    assert await source.poll() == []  # nothing moved: nothing read
    writer.update(placeholder, planner_step("Hello", "", status="CORTEX_STEP_STATUS_GENERATING"))
    changed = await source.poll()
    assert [s.index for s in changed] == [placeholder]
    assert changed[0].text == "Hello"
    # The light scan saw only the non-final row; one payload was fetched, whatever the length.
    assert source.last_read == (1, 1)
    writer.update(placeholder, planner_step("Hello there", ""))
    assert [s.text for s in await source.poll()] == ["Hello there"]
    writer.append(planner_step("next", ""))
    assert [s.text for s in await source.poll()] == ["next"]
    assert source.last_read == (1, 1)  # the finished row is no longer re-read
    source.close()
    writer.close()


async def test_no_change_costs_no_sql_and_a_commit_is_seen(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=2)
    source = await open_source(db)
    await source.poll()
    statements: list[str] = []
    assert source._conn is not None
    source._conn.set_trace_callback(statements.append)
    for _ in range(5):
        assert await source.poll() == []
    assert statements == []  # the files did not change: not even a pragma
    # Past RECHECK_EVERY a real look happens whatever the files say (their times are coarse).
    source._read_at -= sqlite_source.RECHECK_EVERY
    assert await source.poll() == []
    assert statements == ["PRAGMA data_version"]
    writer.append(planner_step("new", ""))
    assert [s.text for s in await source.poll()] == ["new"]  # the -wal changed: read at once
    source.close()
    writer.close()


async def test_placeholder_rows_are_never_passed(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    index = writer.append(planner_step("", ""))  # already DONE, still empty: a placeholder
    source = await open_source(db, min_index=STEPS_PER_TURN - 1)
    (step,) = await source.poll()
    assert step.kind is StepKind.ASSISTANT and step.status is StepStatus.DONE and not step.final
    assert source.last_final_index() == index - 1
    writer.update(index, planner_step("The answer", ""))
    (step,) = await source.poll()
    assert step.text == "The answer" and step.final
    assert source.last_final_index() == index
    source.close()
    writer.close()


async def test_a_locked_database_is_read_next_tick(tmp_path: Path) -> None:
    # WAL readers are never blocked, so lock a rollback-journal copy: there an exclusive writer
    # really makes readers fail with "database is locked".
    wal = tmp_path / "wal.db"
    writer = write_conversation(wal, str(uuid.uuid4()), turns=1)
    writer.close(checkpoint=True)
    db = tmp_path / "c.db"
    shutil.copy(wal, db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("PRAGMA journal_mode=DELETE")
    source = await open_source(db)
    assert len(await source.poll()) == STEPS_PER_TURN
    payload = planner_step("late answer", "").SerializeToString()
    other.execute("BEGIN EXCLUSIVE")
    other.execute(
        "INSERT INTO steps(idx, step_type, status, step_payload) VALUES (?, 15, 3, ?)",
        (STEPS_PER_TURN, payload),
    )
    assert await source.poll() == []  # locked: no error, nothing lost, try again
    other.execute("COMMIT")
    (step,) = await source.poll()
    assert step.text == "late answer"
    source.close()
    other.close()


async def test_corrupt_rows_are_skipped_with_a_reason(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    writer.write_raw(STEPS_PER_TURN, 15, 3, b"\x0a\xff\xff\xff")
    writer.append(planner_step("after the corrupt row", ""))
    source = await open_source(db, min_index=STEPS_PER_TURN - 1)
    steps = await source.poll()
    assert [s.text for s in steps] == ["after the corrupt row"]
    assert [index for index, _ in source.skipped] == [STEPS_PER_TURN]
    source.close()
    writer.close()


def test_a_database_that_fails_to_open_leaves_no_descriptor_behind(tmp_path: Path) -> None:
    """A connection that opened but could not read (here: not SQLite, a `-wal` beside it) is
    closed at once: a sqlite3 connection sits in a reference cycle, so one merely dropped keeps
    the file open until the garbage collector happens to run (a turn retries its open)."""
    import gc
    import os

    from agy_provider.agy.database import open_conversation_db
    from agy_provider.errors import DatabaseError

    path = tmp_path / "c.db"
    path.write_bytes(b"not a database at all" * 100)
    (tmp_path / "c.db-wal").write_bytes(b"")

    def open_here() -> int:
        return sum(
            os.readlink(f"/proc/self/fd/{fd}") == str(path)
            for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")
        )

    gc.disable()
    try:
        for _ in range(3):
            with pytest.raises(DatabaseError):
                open_conversation_db(path)
        assert open_here() == 0
    finally:
        gc.enable()


def _wal_frames(tmp_path: Path) -> tuple[bytes, int]:
    """A real `-wal` whose one commit spans several frames, and its frame size."""
    db = tmp_path / "real.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t(x BLOB)")
    conn.execute("INSERT INTO t VALUES (?)", (b"x" * 20_000,))  # ~5 pages: one multi-frame commit
    wal = (tmp_path / "real.db-wal").read_bytes()
    conn.close()
    return wal, 24 + int.from_bytes(wal[8:12], "big")


def test_a_log_that_ends_mid_commit_is_told_from_one_that_ends_a_commit(tmp_path: Path) -> None:
    from agy_provider.agy.database import wal_end

    wal, frame = _wal_frames(tmp_path)
    assert (len(wal) - 32) % frame == 0 and (len(wal) - 32) // frame >= 3
    cases = {
        "half a frame header": wal[: len(wal) - frame + 10],
        "a header without its page": wal[: len(wal) - frame + 24],
        "the commit's last frame not yet written": wal[: len(wal) - frame],
    }
    for name, data in cases.items():
        (tmp_path / "c.db-wal").write_bytes(data)
        assert wal_end(tmp_path / "c.db") == database.WalEnd(pending=True, commit=None), name
    (tmp_path / "c.db-wal").write_bytes(wal)
    whole = wal_end(tmp_path / "c.db")
    assert whole is not None and not whole.pending and whole.commit
    # Another commit (its checksums differ) is another mark.
    other = wal[: -frame + 16] + bytes(b ^ 0xFF for b in wal[-frame + 16 : -frame + 24]) + wal[-frame + 24 :]
    (tmp_path / "c.db-wal").write_bytes(other)
    again = wal_end(tmp_path / "c.db")
    assert again is not None and again.commit not in (None, whole.commit)
    unknown = {
        "only the log's header": wal[:32],
        "not a log": b"\0" * len(wal),
        # The log restarted: frames from its previous round carry the old salts.
        "a frame of the previous round": wal[:-frame] + wal[-frame:][:8] + b"\xff" * 8 + wal[-frame + 16 :],
    }
    for name, data in unknown.items():
        (tmp_path / "c.db-wal").write_bytes(data)
        assert wal_end(tmp_path / "c.db") is None, name
    assert wal_end(tmp_path / "absent.db") is None


def _traced(source: SqliteEventSource) -> list[str]:
    statements: list[str] = []
    assert source._conn is not None
    source._conn.set_trace_callback(statements.append)
    return statements


@contextlib.asynccontextmanager
async def read_from_now(
    tmp_path: Path,
) -> AsyncIterator[tuple[Path, ConversationWriter, SqliteEventSource, list[str]]]:
    """A one-turn conversation, a source that has read it all, and the SQL it runs from now."""
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    source = await open_source(db)
    await source.poll()
    try:
        yield db, writer, source, _traced(source)
    finally:
        source.close()
        writer.close()


async def test_a_commit_still_being_written_is_not_read_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The window bounds how long a misleading log can hold reads back: not the point here.
    monkeypatch.setattr(sqlite_source, "PENDING_WINDOW", 3600.0)
    async with read_from_now(tmp_path) as (db, writer, source, statements):
        # What agy's -wal holds between the first and the last write of a commit: a frame's header
        # past the log's end (SQLite ignores it, and overwrites it with the next real commit).
        with open(f"{db}-wal", "ab") as wal:
            wal.write(b"\0\0\0\1" + b"\0" * 20)
        for _ in range(3):
            assert await source.poll() == []
        assert statements == []  # not even a pragma while the commit cannot be visible
        writer.append(planner_step("whole", ""))
        assert [s.text for s in await source.poll()] == ["whole"]
        # A log that keeps saying "mid-commit" is read anyway once the window is over.
        with open(f"{db}-wal", "ab") as wal:
            wal.write(b"\0\0\0\1" + b"\0" * 20)
        assert await source.poll() == []
        monkeypatch.setattr(sqlite_source, "PENDING_WINDOW", 0.0)
        statements.clear()
        assert await source.poll() == []
        assert statements == ["PRAGMA data_version"]


async def test_files_that_change_with_no_new_commit_are_not_read(tmp_path: Path) -> None:
    async with read_from_now(tmp_path) as (db, writer, source, statements):
        # The files change, the log's last commit does not (a checkpoint looks so to a reader).
        os.utime(f"{db}-wal", ns=(1, 1))
        os.utime(db, ns=(1, 1))
        for _ in range(5):
            assert await source.poll() == []
        assert statements == []
        writer.append(planner_step("later", ""))
        assert [s.text for s in await source.poll()] == ["later"]


async def test_a_written_commit_not_yet_visible_is_looked_for_until_it_is(tmp_path: Path) -> None:
    async with read_from_now(tmp_path) as (db, writer, source, statements):
        # A log that ends in a commit no read has seen, while SQLite's index does not show it yet:
        # the last frame's checksums changed in place (readers go by the index, not by them).
        wal_path = f"{db}-wal"
        original = Path(wal_path).read_bytes()
        frame = 24 + int.from_bytes(original[8:12], "big")
        at = len(original) - frame + 16
        with open(wal_path, "r+b") as wal:
            wal.seek(at)
            wal.write(bytes(b ^ 0xFF for b in original[at : at + 8]))
        os.utime(wal_path, ns=(1, 1))  # the same size: make sure the times differ
        looks = sqlite_source.SETTLE_TRIES + 5
        for _ in range(looks):
            assert await source.poll() == []
        assert statements == ["PRAGMA data_version"] * looks  # still looking past SETTLE_TRIES
        with open(wal_path, "r+b") as wal:
            wal.seek(at)
            wal.write(original[at : at + 8])
        writer.append(planner_step("published", ""))
        assert [s.text for s in await source.poll()] == ["published"]
        assert source._settling == 0


async def test_a_change_the_log_cannot_explain_is_looked_at_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    writer.close(checkpoint=True)  # no -wal: the log tells nothing
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    source = await open_source(db)
    await source.poll()
    statements = _traced(source)
    os.utime(db, ns=(1, 1))
    for _ in range(10):
        assert await source.poll() == []
    assert statements == ["PRAGMA data_version"] * (1 + sqlite_source.SETTLE_TRIES)
    source.close()


async def test_a_notification_after_a_read_that_saw_the_files_is_looked_at_a_few_times(
    tmp_path: Path,
) -> None:
    # The write that notified came before the last read looked, and its commit may have been
    # published only after that look: the files are as that read saw them, yet worth a look.
    async with read_from_now(tmp_path) as (db, _writer, source, statements):
        with open(f"{db}-wal", "ab"):
            pass  # closed after writing: a notification that changes neither size nor time
        await source.wait(30.0)
        for _ in range(10):
            assert await source.poll() == []
        assert statements == ["PRAGMA data_version"] * (1 + sqlite_source.SETTLE_TRIES)
        statements.clear()
        await source.wait(0.01)  # nothing notified: the tick times out
        assert await source.poll() == []
        assert statements == []
