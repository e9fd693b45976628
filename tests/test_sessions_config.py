"""Sessions store and config: atomic, multi-process safe, validated, never torn by kill -9."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agy_provider.config import Config, load_config, save_config
from agy_provider.errors import UsageError
from agy_provider.sessions import SessionRecord, SessionStore, valid_conversation_id

UUID = "2399249c-4a48-40f1-bf3b-4c6e5d3a5a0e"


def _writer(path: str, worker: int, count: int) -> None:
    store = SessionStore(Path(path))
    for n in range(count):
        store.put(f"w{worker}-{n}", SessionRecord(conversation_id=UUID, last_step_index=n))


def test_concurrent_writers_merge(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(str(path), w, 15)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    records = SessionStore(path).all()
    assert set(records) == {f"w{w}-{n}" for w in range(4) for n in range(15)}


def test_kill_9_mid_write_never_corrupts(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    SessionStore(path).put("seed", SessionRecord(conversation_id=UUID))
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from agy_provider.sessions import SessionRecord, SessionStore
        store = SessionStore(Path({str(path)!r}))
        n = 0
        while True:
            # A big store makes each write long enough to be killed inside it.
            store.put(f"s{{n % 400}}", SessionRecord(conversation_id={UUID!r}, last_step_index=n, agy_version="x" * 2000))
            n += 1
        """
    )
    for delay in (0.05, 0.13, 0.21, 0.34, 0.5):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        data = json.loads(path.read_text())  # never torn: always valid JSON
        assert "seed" in data["sessions"]
        assert SessionStore(path).get("seed") is not None
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) <= 5  # a killed writer may leave its temp file; never the store itself


def test_invalid_records_are_dropped_on_load(tmp_path: Path) -> None:
    path = tmp_path / "sessions.json"
    path.write_text(
        json.dumps(
            {
                "sessions": {
                    "good": {"conversation_id": UUID, "last_step_index": 3},
                    "flag": {"conversation_id": "-rf", "last_step_index": 3},
                    "index": {"conversation_id": UUID, "last_step_index": "x"},
                }
            }
        )
    )
    assert set(SessionStore(path).all()) == {"good"}
    path.write_text("{not json")
    assert SessionStore(path).all() == {}


def test_conversation_ids_that_could_be_flags_are_refused() -> None:
    assert valid_conversation_id(UUID)
    for bad in ("-x", "--conversation", "", "a b", "a/b", "x" * 129):
        assert not valid_conversation_id(bad)


def test_config_round_trip_and_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    assert load_config(path, env={}) == Config()
    save_config(
        Config(mode="plan", permissions="skip", model="gemini-3.7-flash", thinking="high"), path
    )
    loaded = load_config(path, env={})
    assert (loaded.mode, loaded.permissions, loaded.model, loaded.thinking) == (
        "plan",
        "skip",
        "gemini-3.7-flash",
        "high",
    )
    env = {"AGY_MODE": "accept-edits", "AGY_TURN_TIMEOUT": "42", "AGY_BIN": "/opt/agy"}
    overridden = load_config(path, env=env)
    assert (overridden.mode, overridden.turn_timeout, overridden.agy_bin) == (
        "accept-edits",
        42.0,
        "/opt/agy",
    )
    assert load_config(path, env={}).mode == "plan"  # env never written back


def test_config_rejects_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mode": "yolo"}))
    with pytest.raises(UsageError, match="mode must be one of"):
        load_config(path, env={})
    with pytest.raises(UsageError, match="positive"):
        load_config(tmp_path / "none.json", env={"AGY_IDLE_TIMEOUT": "0"})
    path.write_text("[1]")
    with pytest.raises(UsageError, match="JSON object"):
        load_config(path, env={})
