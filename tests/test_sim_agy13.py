"""agy-sim's 1.3.3 personality (AGY-FORMATS §2.3, unverified shapes) and 1.2+'s silent fork.

Runs agy-sim as a real process: `init` before any input with `init.model`, `-p /usage` answered
by agy itself, `finish` steps in stream-json and the database, exit 3 with an `AGY_ERROR:` line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sim_support import databases
from sim_support import rows
from sim_support import run_sim
from sim_support import sim_argv
from sim_support import sim_env

from agy_provider.agy.quota import parse_usage
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.sim.scenario import load_scenario

pytestmark = pytest.mark.slow

V133 = "1.3.3"


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_init_comes_before_any_input_and_names_the_model(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        sim_argv("--input-format", "stream-json", "--output-format", "stream-json"),
        env=sim_env(tmp_path / "app", AGY_SIM_VERSION=V133),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = json.loads(proc.stdout.readline())  # nothing written to stdin yet
        assert first["event"] == "init" and first["init"]["model"]
        line = json.dumps({"event": "user", "message": {"content": "hi"}})
        out, _ = proc.communicate(line + "\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    later = events(out)
    assert [e["event"] for e in later].count("init") == 0  # printed once, at start
    assert later[-1]["result"]["conversation_id"] == first["conversation_id"]
    assert proc.returncode == 0


def test_finish_step_in_stream_json_and_in_the_database(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "hi", "--output-format", "stream-json", AGY_SIM_VERSION=V133)
    assert done.returncode == 0, done.stderr
    updates = [e["step_update"] for e in events(done.stdout) if e["event"] == "step_update"]
    assert updates[-1]["step_type"] == "finish" and updates[-1]["state"] == "DONE"
    [db] = databases(app)
    last = rows(db)[-1]
    assert last[1] == 2  # CORTEX_STEP_TYPE_FINISH
    step = decode_step_row(last[0], last[1], last[2], last[4], error_details=last[3])
    assert step.kind is StepKind.SYSTEM
    older = run_sim(tmp_path / "old", "-p", "hi", "--output-format", "stream-json")
    assert '"finish"' not in older.stdout  # 1.2.13 as before


@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_usage_is_a_command_result_with_zero_tokens(tmp_path: Path, fmt: str) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "/usage", "--output-format", fmt, AGY_SIM_VERSION=V133)
    assert done.returncode == 0, done.stderr
    if fmt == "json":
        body = json.loads(done.stdout)
        command = body["command"]
    else:
        lines = events(done.stdout)
        assert [e["event"] for e in lines] == ["init", "command_result", "result"]
        command, body = lines[1]["command"], lines[2]["result"]
    assert command["name"] == "usage"
    assert body["num_turns"] == 0 and body["usage"]["total_tokens"] == 0
    buckets = parse_usage(command["data"])
    assert buckets and all(b.remaining is not None and b.resets_at for b in buckets)
    assert not databases(app)  # agy answers it itself: no conversation written


def test_quota_under_1_3_exits_3_with_agys_error_line(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app", "-p", "hi", "--output-format", "stream-json",
        scenario="quota-exhausted", AGY_SIM_VERSION=V133,
    )  # fmt: skip
    assert done.returncode == 3
    words = load_scenario("quota-exhausted").quota_exhausted
    assert f"AGY_ERROR: RESOURCE_EXHAUSTED (code 429): {words}" in done.stderr.splitlines()
    assert "goroutine" not in done.stderr


@pytest.mark.parametrize("version", ["1.2.13", "1.3.3"])
def test_an_unknown_conversation_silently_forks(tmp_path: Path, version: str) -> None:
    app = tmp_path / "app"
    asked = "0f0f0f0f-0000-4000-8000-000000000000"
    done = run_sim(
        app, "-p", "hi", "--conversation", asked, "--output-format", "stream-json",
        AGY_SIM_VERSION=version,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f'warning: conversation "{asked}" not found'
    init = events(done.stdout)[0]
    assert init["event"] == "init" and init["conversation_id"] != asked
    assert [db.stem for db in databases(app)] == [init["conversation_id"]]


def test_an_unknown_conversation_is_refused_before_1_2(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app", "-p", "hi", "--conversation", "0f0f0f0f-0000-4000-8000-000000000000",
        AGY_SIM_VERSION="1.1.17",
    )  # fmt: skip
    assert done.returncode == 1 and "not found" in done.stderr


def test_finish_as_the_language_server_renders_it_decodes_as_bookkeeping(tmp_path: Path) -> None:
    from agy_provider.agy.rpcjson import decode_json_step
    from agy_provider.sim.step_reader import render_step
    from agy_provider.sim.step_reader import stream_shape

    app = tmp_path / "app"
    assert run_sim(app, "-p", "hi", AGY_SIM_VERSION=V133).returncode == 0
    [db] = databases(app)
    index, step_type, status, _, payload = rows(db)[-1]
    rendered = render_step(payload, step_type, status)
    assert rendered["type"] == "CORTEX_STEP_TYPE_FINISH"
    for shape in (rendered, stream_shape(rendered)):
        step = decode_json_step(shape, position=index)
        assert step.kind is StepKind.SYSTEM
