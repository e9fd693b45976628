"""agy-sim as a real process: headless turns, output formats, stdin behaviour and every fault."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from sim_support import REAL_FDS, databases, real_class, rows, run_sim, sim_argv, sim_env

from agy_provider.sim import descriptors as pb

pytestmark = pytest.mark.slow


def _step(payload: bytes) -> object:
    step = pb.Step()
    step.ParseFromString(payload)
    return step


def test_print_turn_writes_a_database_and_prints_the_answer(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello! I'm Antigravity")
    [db] = databases(app)
    assert [r[1] for r in rows(db)] == [14, 98, 15, 23]
    log = next((app / "log").glob("cli-*.log")).read_text()
    assert f"Created conversation {db.stem}" in log
    last = json.loads((app / "cache" / "last_conversations.json").read_text())
    assert db.stem in last.values()


def test_print_hangs_while_stdin_is_an_open_pipe(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        sim_argv("-p", "hi"),
        env=sim_env(tmp_path / "app"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)
        assert proc.poll() is None, "agy -p waits for stdin EOF"
        assert not databases(tmp_path / "app")
    finally:
        proc.kill()
        proc.communicate()


def test_models_prints_the_1_1_25_format(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "models")
    lines = done.stdout.splitlines()
    assert lines[0] == "Fetching available models..."
    assert "gemini-3.8-flash-high\tGemini 3.8 Flash (High)" in lines
    assert all("\t" in line for line in lines[1:]) and len(lines) == 15


def test_version(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "--version")
    assert done.returncode == 0 and done.stdout.strip().count(".") == 2


def test_stream_json_lines_end_with_a_result(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "-p", "hi", "--output-format", "stream-json")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["event"] == "init" and events[-1]["event"] == "result"
    cid = events[0]["conversation_id"]
    deltas = "".join(
        e["step_update"].get("text_delta", "") for e in events if e["event"] == "step_update"
    )
    result = events[-1]["result"]
    assert (
        result["status"] == "SUCCESS"
        and result["response"] == deltas
        and result["conversation_id"] == cid
    )
    assert result["usage"]["thinking_tokens"] == 44


def test_json_output_and_effort_rules(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(
        app,
        "-p",
        "hi",
        "--output-format",
        "json",
        "--model",
        "gemini-3.8-flash",
        "--effort",
        "high",
    )
    assert json.loads(done.stdout)["status"] == "SUCCESS"
    refused = run_sim(app, "-p", "hi", "--model", "claude-sonnet-4-6", "--effort", "low")
    assert refused.returncode != 0 and "--effort" in refused.stderr
    bad = run_sim(app, "-p", "hi", "--conversation", "-x")
    assert bad.returncode != 0


def test_resume_writes_history_and_no_second_checkpoint(tmp_path: Path) -> None:
    app = tmp_path / "app"
    first = run_sim(app, "-p", "count", scenario="two-turn")
    [db] = databases(app)
    second = run_sim(app, "-p", "again", "--conversation", db.stem, scenario="two-turn")
    assert (first.stdout, second.stdout) == ("One.\n", "Two.\n")
    types = [r[1] for r in rows(db)]
    assert types == [14, 98, 15, 23, 14, 98, 101, 15]
    cont = run_sim(app, "-p", "more", "-c", scenario="two-turn")
    assert cont.stdout == "Two.\n" and databases(app) == [db]


def test_print_timeout_ends_successfully_with_an_empty_answer(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app", "-p", "hi", "--print-timeout", "500ms", scenario="slow", speed=1
    )
    assert done.returncode == 0 and done.stdout == ""


def test_crash(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "-p", "hi", scenario="crash")
    assert done.returncode == 2 and "panic:" in done.stderr


def test_hang(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        sim_argv("-p", "hi"),
        env=sim_env(tmp_path / "app", "hang"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.5)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()


def test_locked_database_refuses_readers_during_the_window(tmp_path: Path) -> None:
    app = tmp_path / "app"
    proc = subprocess.Popen(
        sim_argv("-p", "hi"),
        env=sim_env(app, "locked", speed=1),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    errors: set[str] = set()
    try:
        while proc.poll() is None:
            for db in databases(app):
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0)
                try:
                    conn.execute("SELECT COUNT(*) FROM steps").fetchone()
                except sqlite3.OperationalError as exc:
                    errors.add(str(exc))
                finally:
                    conn.close()
                time.sleep(0.02)
            time.sleep(0.01)
    finally:
        out, _ = proc.communicate(timeout=20)
    assert "database is locked" in errors
    assert out.startswith("Hello!")


@pytest.mark.skipif(not REAL_FDS.exists(), reason="../shared/reference is absent")
def test_corrupt_row_does_not_parse_with_the_real_schema(tmp_path: Path) -> None:
    from google.protobuf.message import DecodeError

    app = tmp_path / "app"
    assert run_sim(app, "-p", "hi", scenario="corrupt-row").returncode == 0
    [db] = databases(app)
    by_index = {r[0]: r for r in rows(db)}
    with pytest.raises(DecodeError):
        real_class("gemini_coder.Step")().ParseFromString(by_index[2][4])
    real_class("gemini_coder.Step")().ParseFromString(by_index[3][4])


def test_subagent_writes_a_second_conversation(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "research", scenario="subagent")
    assert done.returncode == 0
    dbs = databases(app)
    assert len(dbs) == 2
    cascades = {}
    for db in dbs:
        with sqlite3.connect(db) as conn:
            cascades[db.stem] = conn.execute(
                "SELECT cascade_id, source FROM trajectory_meta"
            ).fetchone()
        for _, _, _, _, payload in rows(db):
            assert _step(payload).metadata.source_trajectory_step_info.cascade_id == db.stem  # type: ignore[attr-defined]
    assert {c for c, _ in cascades.values()} == {db.stem for db in dbs}
    assert sorted(s for _, s in cascades.values()) == [16, 17]


def test_empty_answer(tmp_path: Path) -> None:
    done = run_sim(tmp_path / "app", "-p", "hi", scenario="empty-answer")
    assert done.returncode == 0 and done.stdout == ""


def test_quota_error(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "hi", "--output-format", "stream-json", scenario="quota-error")
    result = json.loads(done.stdout.splitlines()[-1])["result"]
    assert result["status"] == "ERROR" and "exhausted your capacity" in result["error"]
    assert done.returncode == 1
    [db] = databases(app)
    found = [r for r in rows(db) if r[1] == 17]
    assert len(found) == 1
    error = _step(found[0][4]).error_message.error  # type: ignore[attr-defined]
    assert "RESOURCE_EXHAUSTED" in error.short_error and "429" in error.full_error
    planner = [r for r in rows(db) if r[1] == 15]
    assert planner[0][2] == 7


def test_unanswered_permission_is_denied_and_the_turn_exits_zero(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(
        app, "-p", "pwd", "--output-format", "stream-json", scenario="permission", speed=20
    )
    assert done.returncode == 0
    events = [json.loads(line) for line in done.stdout.splitlines()]
    tool = [e["step_update"] for e in events if e.get("step_update", {}).get("step_type") == "tool"]
    assert tool[0]["state"] == "ACTIVE" and tool[-1]["state"] == "ERROR"
    [db] = databases(app)
    [denied] = [r for r in rows(db) if r[1] == 132]
    assert denied[2] == 7 and b"user denied permission" in denied[3]
    assert [r[1] for r in rows(db)][-2:] == [15, 23], "the model's follow-up planner step runs"


def test_skip_permissions_runs_the_tool(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "pwd", "--dangerously-skip-permissions", scenario="permission")
    assert done.returncode == 0 and "Done" in done.stdout
    [db] = databases(app)
    [tool] = [r for r in rows(db) if r[1] == 132]
    assert tool[2] == 3


def test_stream_json_input_runs_one_turn_per_line(tmp_path: Path) -> None:
    line = json.dumps(
        {"event": "user", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}
    )
    proc = subprocess.run(
        sim_argv("--input-format", "stream-json", "--output-format", "stream-json"),
        env=sim_env(tmp_path / "app", "two-turn"),
        input=line + "\n" + line + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    results = [
        json.loads(x)["result"] for x in proc.stdout.splitlines() if '"event": "result"' in x
    ]
    assert [r["response"] for r in results] == ["One.", "Two."]
    assert len({r["conversation_id"] for r in results}) == 1
