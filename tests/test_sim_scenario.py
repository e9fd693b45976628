"""Scenario files, Go durations and `agy-sim record`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agy_provider.errors import UsageError
from agy_provider.sim.record import record
from agy_provider.sim.scenario import builtin_scenarios
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.scenario import parse_scenario
from agy_provider.sim.session import parse_go_duration

REQUIRED = {
    "default", "thinking", "tools", "slow", "permission", "question", "crash", "hang", "quota-error",
    "corrupt-row", "subagent", "stream-drop", "empty-answer", "locked",
}  # fmt: skip


def test_every_builtin_scenario_loads() -> None:
    names = set(builtin_scenarios())
    assert names >= REQUIRED
    for name in names:
        assert load_scenario(name).turns


def test_scenario_from_env_and_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps({"turns": [{"steps": [{"text": ["ok"]}]}], "server": {"split_frames": 3}})
    )
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(path))
    scenario = load_scenario()
    assert scenario.name == "mine" and scenario.server == {"split_frames": 3}
    monkeypatch.setenv("AGY_SIM_SCENARIO", "stream-drop")
    assert load_scenario().server["stream_drop_after"] == 2


@pytest.mark.parametrize(
    "bad",
    [{}, {"turns": [{"steps": [{"type": "nope"}]}]}, {"turns": [{"steps": [{"text": 3}]}]},
     {"turns": [{"steps": [{"tools": [{"args": {}}]}]}]}],
)  # fmt: skip
def test_bad_scenarios_are_refused(bad: object) -> None:
    with pytest.raises(UsageError):
        parse_scenario(bad, "bad")
    with pytest.raises(UsageError):
        load_scenario("no-such-scenario")


def test_go_durations() -> None:
    assert parse_go_duration("5m0s") == 300
    assert parse_go_duration("90s") == 90
    assert parse_go_duration("1m30s") == 90
    assert parse_go_duration("500ms") == 0.5
    assert parse_go_duration("1.5h") == 5400
    for bad in ("", "5", "m", "5x", "1m 2s"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)


def test_record_writes_the_fixture_set(tmp_path: Path) -> None:
    names = record(tmp_path)
    assert {"simple-thinking", "two-turn", "tool-run", "quota-error", "corrupt-row"} <= set(names)
    assert not list(tmp_path.glob("db/*-wal")) and not list(tmp_path.glob("db/*-shm"))
    with sqlite3.connect(tmp_path / "db" / "two-turn.db") as db:
        types = [r[0] for r in db.execute("SELECT step_type FROM steps ORDER BY idx")]
    assert types.count(98) == 1 and types.count(23) == 1  # 1.1.18+: no history on turn 1
    poll = json.loads((tmp_path / "rpc" / "tool-run.poll.json").read_text())["steps"]
    stream = json.loads((tmp_path / "rpc" / "tool-run.stream.json").read_text())["steps"]
    assert any("toolCall" in s["metadata"] for s in poll)
    assert any(s.get("plannerResponse", {}).get("toolCalls") for s in poll)
    # The stream drops tool calls; a GENERIC step keeps only the name (as the real captures show).
    assert not any("toolCalls" in s.get("plannerResponse", {}) for s in stream)
    assert all(
        "argumentsJson" not in s["metadata"].get("toolCall", {})
        and ("toolCall" not in s["metadata"] or s["type"] == "CORTEX_STEP_TYPE_GENERIC")
        for s in stream
    )
    lines = (tmp_path / "stream-json" / "two-turn.ndjson").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines].count("result") == 2
    assert "tool-run" in (tmp_path / "README.md").read_text()
