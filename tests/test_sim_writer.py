"""The simulator's database writer, observed from a second connection as a reader would."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from pathlib import Path

from agy_provider.sim import descriptors as pb
from agy_provider.sim.engine import Clock
from agy_provider.sim.engine import Simulator
from agy_provider.sim.payloads import StepFactory
from agy_provider.sim.scenario import DEFAULT_CATALOG
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.writer import SCHEMA
from agy_provider.sim.writer import ConversationWriter


def _reader(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0)


def test_schema_is_agys_exactly_in_wal_mode(tmp_path: Path) -> None:
    writer = ConversationWriter(tmp_path / "c.db", "c1")
    with _reader(writer.path) as db:
        sql = [
            r[0]
            for r in db.execute(
                "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
            )
        ]
        assert sql == list(SCHEMA)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert len(tables) == 7
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT * FROM trajectory_meta").fetchall() == [("c1", "c1", 4, 17)]
    writer.close()


def test_commits_are_not_synced_like_googles_runtime(tmp_path: Path) -> None:
    """Google's runtime, the real writer we can run, opens its database `_synchronous=NORMAL`:
    in WAL mode only a checkpoint syncs, not each commit."""
    writer = ConversationWriter(tmp_path / "c.db", "c1")
    assert writer._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    writer.close()


def test_placeholder_first_then_text_grows_in_place(tmp_path: Path) -> None:
    sim = Simulator(load_scenario("default"), tmp_path, clock=Clock(speed=1))
    conversation = sim.open()
    thread = threading.Thread(target=sim.run_turn, args=(conversation, "hi"))
    thread.start()
    seen: list[tuple[int, str]] = []
    db = _reader(conversation.writer.path)

    def poll() -> None:
        try:
            row = db.execute("SELECT status, step_payload FROM steps WHERE idx=2").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is not None:
            step = pb.Step()
            step.ParseFromString(row[1])
            snapshot = (row[0], step.planner_response.modified_response)
            if not seen or seen[-1] != snapshot:
                seen.append(snapshot)

    while thread.is_alive():
        poll()
        time.sleep(0.005)
    thread.join()
    poll()  # the last commit may land after the last poll
    assert seen[0] == (1, ""), "the planner row starts as an empty PENDING placeholder"
    statuses = [s for s, _ in seen]
    assert statuses[0] == 1 and 8 in statuses and statuses[-1] == 3
    assert statuses.index(8) < len(statuses) - 1
    growing = [t for s, t in seen if s == 8 and t]
    assert len(growing) >= 2 and all(b.startswith(a) for a, b in itertools.pairwise(growing))
    with db:
        cols = db.execute("SELECT step_type, status, metadata FROM steps ORDER BY idx").fetchall()
        assert [c[0] for c in cols] == [14, 23, 15]  # 1.1.18+: the checkpoint right after
        assert all(c[2] is None for c in cols), "the metadata column stays NULL"
        gens = db.execute("SELECT data FROM gen_metadata ORDER BY idx").fetchall()
        assert len(gens) == 2  # the answer's model call and the title's
        record = pb.CortexStepGeneratorMetadata()
        record.ParseFromString(gens[1][0])  # gens[0] is the title's
        assert record.chat_model.response_model == "gemini-3.8-flash-medium"
        assert record.chat_model.usage.input_tokens == 17161
        assert record.chat_model.retry_infos[0].usage == record.chat_model.usage
        payloads = db.execute("SELECT idx, step_payload FROM steps").fetchall()
    for index, payload in payloads:
        step = pb.Step()
        step.ParseFromString(payload)
        info = step.metadata.source_trajectory_step_info
        assert (info.step_index, info.cascade_id) == (index, conversation.id)
        assert info.trajectory_id == conversation.trajectory_id
    checkpoint = pb.Step()
    checkpoint.ParseFromString(payloads[1][1])
    assert checkpoint.checkpoint.user_intent == "Friendly Greeting"
    db.close()


def test_placeholder_can_start_done(tmp_path: Path) -> None:
    from agy_provider.sim.scenario import parse_scenario

    scenario = parse_scenario(
        {
            "placeholder_done": True,
            "turns": [{"steps": [{"text": ["a", "b"], "chunk_ms": 300, "first_token_ms": 300}]}],
        }
    )
    sim = Simulator(scenario, tmp_path, clock=Clock(speed=1))
    conversation = sim.open()
    first: list[int] = []
    sim.listeners.append(
        lambda cid, index, step: first.append(step.status) if index == 2 and not first else None
    )
    sim.run_turn(conversation, "x")
    assert first == [3]


def test_bulk_mode_writes_ten_thousand_steps_in_one_commit(tmp_path: Path) -> None:
    commits: list[int] = []
    writer = ConversationWriter(tmp_path / "big.db", "big", on_commit=lambda: commits.append(1))
    factory = StepFactory(time.time, "exec", DEFAULT_CATALOG[0])
    before = len(commits)
    with writer.bulk():
        for i in range(10_000):
            writer.append(factory.user_input(f"message {i}"))
    assert len(commits) - before == 1  # one transaction, not ten thousand commits
    with _reader(writer.path) as db:
        assert db.execute("SELECT COUNT(*), MIN(idx), MAX(idx) FROM steps").fetchone() == (
            10_000,
            0,
            9_999,
        )
    writer.close()


def test_every_write_is_its_own_commit(tmp_path: Path) -> None:
    commits: list[int] = []
    writer = ConversationWriter(tmp_path / "c.db", "c", on_commit=lambda: commits.append(1))
    factory = StepFactory(time.time, "exec", DEFAULT_CATALOG[0])
    index = writer.append(factory.user_input("a"))
    step = factory.planner_placeholder(False)
    writer.append(step)
    writer.update(index + 1, step)
    assert len(commits) == 3
    writer.close(checkpoint=True)
    assert not Path(str(writer.path) + "-wal").exists()
