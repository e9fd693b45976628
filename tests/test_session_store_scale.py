"""The session store at its size: a host finds its record among thousands by parsing only its
line, saves rewrite only the lines they change, the conversation records stay bounded oldest
first, and an older layout of the file is still read and then rewritten line by line."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from agy_provider.store.sessions import MAX_CONVERSATION_RECORDS
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore


def cid(n: int) -> str:
    return str(uuid.UUID(int=n))


def write_store(path: Path, count: int) -> dict[str, SessionRecord]:
    """`count` records as hosts leave them, in one save: a named session's (`serve:user<n>`,
    never pruned) and, for the first of them up to the bound, its conversation's."""
    records = {}
    conversations = min(count // 2, MAX_CONVERSATION_RECORDS)
    for n in range(count - conversations):
        records[f"serve:user{n}"] = SessionRecord(conversation_id=cid(n), last_step_index=n)
    for n in range(conversations):
        records[f"conv:{cid(n)}"] = SessionRecord(
            conversation_id=cid(n), last_step_index=n, mark=f"m{n}", history_digest=f"d{n}"
        )
    SessionStore(path).put_many(records)
    return records


def test_a_host_finds_its_session_among_ten_thousand(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    write_store(path, 10_000)
    store = SessionStore(path)
    for n in (0, 1, 1_999, 7_999):
        session = store.get(f"serve:user{n}")
        assert session is not None and session.conversation_id == cid(n)
        assert session.last_step_index == n
    for n in (0, 1_999):
        conversation = store.get(f"conv:{cid(n)}")
        assert conversation is not None and conversation.mark == f"m{n}"
    # A key that is a prefix, or a suffix, of another is not that other.
    assert store.get("serve:user4") is not None and store.get("serve:user79999") is None
    assert store.get("user1") is None and store.get("serve:") is None
    assert store.get("m1") is None  # a value is never a key


def test_saves_keep_every_other_record_and_deletes_remove_only_theirs(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    records = write_store(path, 1_000)
    store = SessionStore(path)
    store.put("serve:user3", SessionRecord(conversation_id=cid(9_999), last_step_index=42))
    store.put("serve:new", SessionRecord(conversation_id=cid(7)))
    store.delete("serve:user0")
    store.delete("serve:user499")  # the last line of its run
    store.delete("not there")
    listed = {k: (r.conversation_id, r.last_step_index) for k, r in SessionStore(path).all().items()}
    expected = {k: (r.conversation_id, r.last_step_index) for k, r in records.items()}
    expected["serve:user3"] = (cid(9_999), 42)
    expected["serve:new"] = (cid(7), -1)
    del expected["serve:user0"], expected["serve:user499"]
    assert listed == expected
    assert json.loads(path.read_text())["version"] == 1  # still JSON as a whole


def test_keys_that_need_escaping_are_found(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    keys = ['a "quoted" key', "back\\slash", "ünïcode:☃", "tab\there", "conv-like: {x}"]
    store = SessionStore(path)
    for n, key in enumerate(keys):
        store.put(key, SessionRecord(conversation_id=cid(n), last_step_index=n))
    for n, key in enumerate(keys):
        record = store.get(key)
        assert record is not None and record.last_step_index == n, key
    assert set(store.all()) == set(keys)


def test_conversation_records_past_the_bound_go_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    store = SessionStore(path)
    first = {
        f"conv:{cid(n)}": SessionRecord(conversation_id=cid(n)) for n in range(MAX_CONVERSATION_RECORDS)
    }
    store.put_many(first)
    store.put("serve:keep", SessionRecord(conversation_id=cid(1)))
    # The oldest conversation is touched again: it is now the newest.
    store.put(f"conv:{cid(0)}", SessionRecord(conversation_id=cid(0), last_step_index=5))
    for n in range(3):
        key = f"conv:{cid(10_000 + n)}"
        store.put(key, SessionRecord(conversation_id=cid(10_000 + n)))
    kept = SessionStore(path).all()
    conversations = [k for k in kept if k.startswith("conv:")]
    assert len(conversations) == MAX_CONVERSATION_RECORDS
    assert "serve:keep" in kept  # a session's record is never pruned
    assert f"conv:{cid(0)}" in kept and kept[f"conv:{cid(0)}"].last_step_index == 5
    # The three that went were among the first batch (one write: the same time), never the new.
    assert all(f"conv:{cid(10_000 + n)}" in kept for n in range(3))
    gone = set(first) - set(kept)
    assert len(gone) == 3 and f"conv:{cid(0)}" not in gone


def test_an_older_layout_is_read_and_the_next_save_writes_lines(tmp_path: Path) -> None:
    """Before this layout the store was indented JSON (a record over several lines)."""
    path = tmp_path / "sessions.json"
    old = {
        "sessions": {
            f"s{n}": {"conversation_id": cid(n), "last_step_index": n, "updated_at": 1.0}
            for n in range(5)
        },
        "version": 1,
    }
    path.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")
    store = SessionStore(path)
    record = store.get("s3")
    assert record is not None and record.last_step_index == 3
    store.put("s9", SessionRecord(conversation_id=cid(9), last_step_index=9))
    lines = path.read_text().splitlines()
    assert len(lines) == 6 + 5  # the frame, and one line per record
    assert {k: r.last_step_index for k, r in SessionStore(path).all().items()} == {
        **{f"s{n}": n for n in range(5)},
        "s9": 9,
    }


def test_a_malformed_line_costs_only_its_own_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.json"
    write_store(path, 10)
    lines = path.read_text().split("\n")
    (bad,) = [n for n, line in enumerate(lines) if line.startswith('    "serve:user2"')]
    lines[bad] = lines[bad].replace('"last_step_index": 2,', '"last_step_index": "two",')
    path.write_text("\n".join(lines))
    store = SessionStore(path)
    with caplog.at_level(logging.WARNING):
        assert store.get("serve:user2") is None
        assert store.get("serve:user2") is None
        good = store.get("serve:user3")
        store.put("serve:user9", SessionRecord(conversation_id=cid(9)))
    assert good is not None and good.last_step_index == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "'serve:user2'" in warnings[0] and str(path) in warnings[0]
    assert len(SessionStore(path).all()) == 10  # 10, less the malformed, plus the new


def test_concurrent_processes_saving_into_a_big_store_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    write_store(path, 4_000)
    writer = textwrap.dedent(
        """
        import sys, uuid
        from pathlib import Path
        from agy_provider.store.sessions import SessionRecord, SessionStore
        store = SessionStore(Path(sys.argv[1]))
        for n in range(25):
            store.put(f"w{sys.argv[2]}-{n}", SessionRecord(conversation_id=str(uuid.UUID(int=n))))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", writer, str(path), str(w)]) for w in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    keys = set(SessionStore(path).all())
    assert {f"w{w}-{n}" for w in range(4) for n in range(25)} <= keys
    assert len(keys) == 4_000 + 100


def test_a_record_edited_over_several_lines_is_never_torn_by_a_save(tmp_path: Path) -> None:
    """The frame of this layout, but one record spread over lines by hand: a save must not
    replace only its first line."""
    path = tmp_path / "sessions.json"
    first = json.dumps({"conversation_id": cid(1), "last_step_index": 1})
    path.write_text(
        '{\n  "sessions": {\n'
        f'    "a": {first},\n'
        '    "b": {\n'
        f'      "conversation_id": "{cid(2)}",\n'
        '      "last_step_index": 2\n'
        "    }\n"
        '  },\n  "version": 1\n}\n'
    )
    store = SessionStore(path)
    store.put("b", SessionRecord(conversation_id=cid(3), last_step_index=3))
    assert json.loads(path.read_text())["version"] == 1  # still JSON
    assert {k: r.last_step_index for k, r in SessionStore(path).all().items()} == {"a": 1, "b": 3}
