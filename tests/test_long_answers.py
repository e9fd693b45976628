"""A long answer's row and frame reach the decoders with fewer copies (issue 31), and still exactly.

The sqlite reader takes a large payload through a blob handle (one copy, not two) and must give
what a `SELECT` gives, through growth, shrinking and replaced texts; the Connect stream hands a
big frame's pieces on as they arrive and parses it once, when it is complete.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agy_provider.plugins.sqlite_source import SqliteEventSource

from agy_provider.agy.database import BLOB_READ_BYTES
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.database import read_snapshot
from agy_provider.agy.database import read_step_rows
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import Step
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.writer import ConversationWriter
from agy_provider.wire.connect import HEADER_BYTES
from agy_provider.wire.connect import EnvelopeDecoder
from agy_provider.wire.connect import encode_envelope

GENERATING, DONE = "CORTEX_STEP_STATUS_GENERATING", "CORTEX_STEP_STATUS_DONE"
# Multibyte characters of every UTF-8 length; an odd length, so deltas cut them anywhere.
PIECE = "Line with é, ☕ and 𝄞 — ok.\r\n"
LONG = PIECE * (BLOB_READ_BYTES // len(PIECE.encode()) + 40)  # a row past the blob threshold


def selected(conn: sqlite3.Connection, index: int) -> bytes:
    """The payload as a plain `SELECT` gives it (what the reader gave before)."""
    value = conn.execute("SELECT step_payload FROM steps WHERE idx = ?", (index,)).fetchone()[0]
    assert isinstance(value, bytes)
    return value


def test_a_large_payload_is_read_through_a_blob_handle_and_equals_the_select(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    writer = ConversationWriter(db, "c")
    small = writer.append(planner_step("short", status=DONE))
    large = writer.append(planner_step(LONG, status=GENERATING))
    conn = open_conversation_db(db)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        with read_snapshot(conn):
            rows = read_step_rows(conn, [small, large])
        assert [row.index for row in rows] == [small, large]
        assert rows[0].payload == selected(conn, small)
        assert rows[1].payload == selected(conn, large)
        assert len(rows[1].payload or b"") >= BLOB_READ_BYTES
        # One SELECT for both rows: the large payload came through the blob handle, not the
        # one-row SELECT a failed blob read falls back to.
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len([s for s in reads if "step_payload FROM steps WHERE typeof" in s]) == 0
    finally:
        conn.close()
        writer.close()


def test_text_typed_null_and_small_payloads_read_as_before(tmp_path: Path) -> None:
    db = tmp_path / "odd.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE steps(idx INTEGER PRIMARY KEY, step_type INTEGER, status INTEGER, "
        "metadata BLOB, error_details BLOB, step_payload BLOB)"
    )
    big_text = "x" * (BLOB_READ_BYTES + 10)  # stored as TEXT: never read through a blob handle
    conn.executemany(
        "INSERT INTO steps VALUES (?, 15, 8, NULL, NULL, ?)",
        [(1, big_text), (2, None), (3, b"\x08\x0f"), (4, b"\x00" * (BLOB_READ_BYTES * 2))],
    )
    conn.commit()
    conn.close()
    reader = open_conversation_db(db)
    try:
        with read_snapshot(reader):
            rows = read_step_rows(reader, [1, 2, 3, 4])
    finally:
        reader.close()
    assert [row.payload for row in rows] == [
        big_text.encode(),
        None,
        b"\x08\x0f",
        b"\x00" * (BLOB_READ_BYTES * 2),
    ]


def test_a_steps_table_without_rowids_is_read_as_before(tmp_path: Path) -> None:
    db = tmp_path / "norowid.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE steps(idx INTEGER PRIMARY KEY, step_type INTEGER, status INTEGER, "
        "metadata BLOB, error_details BLOB, step_payload BLOB) WITHOUT ROWID"
    )
    payload = planner_step(LONG, status=DONE).SerializeToString()
    conn.execute("INSERT INTO steps VALUES (1, 15, 3, NULL, NULL, ?)", (payload,))
    conn.commit()
    conn.close()
    reader = open_conversation_db(db)
    try:
        with read_snapshot(reader):
            rows = read_step_rows(reader, [1])
    finally:
        reader.close()
    assert [row.payload for row in rows] == [payload]


async def test_a_long_row_grown_shrunk_and_replaced_reads_as_a_fresh_decode(tmp_path: Path) -> None:
    """Every poll of a large row gives the Step a fresh decode of the written payload gives,
    whether the text grew (by deltas that cut multibyte characters), was rewritten shorter, or
    was replaced by a different text of the same length; the assembler streams the growth and
    keeps what it streamed through the rewrites, then takes growth that follows it again."""
    db = tmp_path / "long.db"
    writer = ConversationWriter(db, "long")
    user = writer.append(planner_step("", status=DONE))  # a step before the turn's
    index = writer.append(planner_step(""))
    source = SqliteEventSource(db, min_index=-1)
    await source.open()
    assembler = StepAssembler(model="m", turn_start=user)
    replaced = LONG.replace("é", "è")  # same length in UTF-8, different bytes
    # Grows by deltas of an odd number of characters, crossing the blob threshold.
    texts = [LONG[: len(LONG) * n // 10 + n] for n in range(1, 10)] + [LONG]
    texts += [LONG[:20000], replaced, replaced + PIECE * 3, LONG + PIECE]
    streamed = ""
    try:
        await source.poll(force=True)
        for n, text in enumerate(texts):
            final = n == len(texts) - 1
            written = planner_step(text, status=DONE if final else GENERATING)
            writer.update(index, written)
            changed = await source.poll(force=True)
            expected = decode_step_row(index, 15, 3 if final else 8, written.SerializeToString())
            assert changed == [expected], n
            assert changed[0].text == text
            events = assembler.feed(changed)
            streamed += "".join(e.delta for e in events if e.type == "text_delta")
        # Growth was streamed up to the first rewrite; the replaced text (not what was streamed)
        # emits nothing; the final text extends what was streamed, so its growth is taken.
        assert streamed == LONG + PIECE
        assert index not in source._texts  # final: nothing kept for the row
    finally:
        await source.aclose()
        writer.close()


@pytest.mark.parametrize("fed", [0, 1, HEADER_BYTES - 1, HEADER_BYTES, HEADER_BYTES + 7])
def test_completes_frame_says_no_only_when_the_payload_would_still_be_short(fed: int) -> None:
    payload = bytes(range(256)) * 40
    stream = encode_envelope(payload)
    decoder = EnvelopeDecoder()
    decoder.feed(stream[:fed])
    assert decoder.next_frame() is not None  # NEED_DATA; reads the header once it is whole
    rest = stream[fed:]
    for cut in (1, 100, len(rest) - 1):
        # A header neither parsed nor whole at the start of the data: "maybe", the parse decides.
        header_known = fed >= HEADER_BYTES or (fed == 0 and cut >= HEADER_BYTES)
        assert decoder.completes_frame(rest[:cut]) is (not header_known)
    assert decoder.completes_frame(rest) is True
    decoder.feed(rest)
    frame = decoder.next_frame()
    assert not isinstance(frame, type(None)) and getattr(frame, "payload", None) == payload


def test_steps_compare_equal_after_a_blob_read(tmp_path: Path) -> None:
    """A Step decoded from a blob-read payload is the Step decoded from the selected one."""
    db = tmp_path / "eq.db"
    writer = ConversationWriter(db, "eq")
    index = writer.append(planner_step(LONG + "tail", status=DONE))
    conn = open_conversation_db(db)
    try:
        with read_snapshot(conn):
            (row,) = read_step_rows(conn, [index])
        ours: Step = decode_step_row(index, row.step_type, row.status, row.payload)
        assert ours == decode_step_row(index, row.step_type, row.status, selected(conn, index))
    finally:
        conn.close()
        writer.close()
