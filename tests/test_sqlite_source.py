"""The sqlite event source against real databases written by the simulator's writer."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest
from agy_provider.plugins import sqlite_source
from agy_provider.plugins.sqlite_source import SqliteEventSource
from fakes import HANG

from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.bulk import write_conversation


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


async def test_a_cancelled_sqlite_poll_keeps_its_rows_for_the_next_one(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    writer = write_conversation(db, str(uuid.uuid4()), turns=1)
    answer = writer.append(planner_step("what agy wrote before the abort", ""))
    source = SqliteEventSource(db, min_index=STEPS_PER_TURN - 1)
    await source.open()
    try:
        polling = asyncio.ensure_future(source.poll())
        await asyncio.sleep(0)  # the read is in its worker thread now
        polling.cancel()  # an abort lands while the read runs
        await asyncio.gather(polling, return_exceptions=True)
        # The abort's last read (forced): it must still see the row the cancelled read took.
        steps = await asyncio.wait_for(source.poll(force=True), HANG)
        assert [s.index for s in steps] == [answer]
        assert steps[0].text == "what agy wrote before the abort"
    finally:
        await source.aclose()
        writer.close()
