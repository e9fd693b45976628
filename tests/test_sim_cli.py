"""agy-sim as a real process: headless turns, output formats, stdin behaviour and every fault."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sim_support import REAL_FDS
from sim_support import databases
from sim_support import real_class
from sim_support import rows
from sim_support import run_sim
from sim_support import sim_argv
from sim_support import sim_env

from agy_provider.sim import descriptors as pb

pytestmark = pytest.mark.slow


def _step(payload: bytes | None) -> Any:
    step = pb.Step()
    step.ParseFromString(payload or b"")
    return step


def test_print_turn_writes_a_database_and_prints_the_answer(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hello! I'm Antigravity")
    [db] = databases(app)
    # agy 1.1.18+ writes the checkpoint (the title) right after the user step, no history row.
    assert [r[1] for r in rows(db)] == [14, 23, 15]
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
    assert types == [14, 23, 15, 14, 98, 101, 15]
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
            assert _step(payload).metadata.source_trajectory_step_info.cascade_id == db.stem
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
    error = _step(found[0][4]).error_message.error
    assert "RESOURCE_EXHAUSTED" in error.short_error and "429" in error.full_error
    planner = [r for r in rows(db) if r[1] == 15]
    assert planner[0][2] == 7


def stream_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_unanswered_permission_is_auto_denied_and_ends_the_turn(tmp_path: Path) -> None:
    # Nobody answers in print mode: 1.2.x ends SUCCESS with an empty answer and denied_actions.
    app = tmp_path / "app"
    done = run_sim(
        app, "-p", "pwd", "--output-format", "stream-json", scenario="permission", speed=20
    )
    assert done.returncode == 0
    events = stream_events(done.stdout)
    tool = [e["step_update"] for e in events if e.get("step_update", {}).get("step_type") == "tool"]
    assert tool[0]["state"] == "ACTIVE" and tool[-1]["state"] == "ERROR"
    assert "user denied permission" in tool[-1]["tool_info"]["error"]["message"]
    result = events[-1]["result"]
    assert result["status"] == "SUCCESS" and result["response"] == ""
    assert result["denied_actions"] == [{"action": "command", "display_name": "RunCommand"}]
    [db] = databases(app)
    [denied] = [r for r in rows(db) if r[1] == 132]
    assert denied[2] == 7 and b"user denied permission" in (denied[3] or b"")
    assert [r[1] for r in rows(db)][-1] == 132, "the turn ends at the denial"


@pytest.mark.parametrize(
    ("version", "status", "code"),
    [("1.2.13", "SUCCESS", 0), ("1.1.20", "CANCELED", 0), ("1.1.17", "ERROR", 1)],
)
def test_denied_actions_in_each_versions_shape(
    tmp_path: Path, version: str, status: str, code: int
) -> None:
    from agy_provider.agy.step import TurnOutcome
    from agy_provider.agy.streamjson import StreamJsonDecoder

    done = run_sim(
        tmp_path / "app",
        "-p",
        "pwd",
        "--output-format",
        "stream-json",
        scenario="strict",
        AGY_SIM_VERSION=version,
    )
    assert done.returncode == code
    events = stream_events(done.stdout)
    assert events[0]["init"]["permission_mode"] == "strict"
    result = events[-1]["result"]
    assert result["status"] == status and result["response"] == ""
    assert ("denied_actions" in result) == (version == "1.2.13")
    if version == "1.1.20":
        assert "auto-denied" in done.stderr and "pwd" in done.stderr
    tool = [e["step_update"] for e in events if e.get("step_update", {}).get("step_type") == "tool"]
    error = tool[-1]["tool_info"].get("error") or tool[-1].get("error")
    assert ("error" in tool[-1]) == (version == "1.1.17")  # 1.1.17: beside tool_info
    assert error["type"] == "TOOL_ERROR"
    # Our decoder ends every shape as an error that names the denied command.
    decoder = StreamJsonDecoder()
    decoder.note_stderr(done.stderr)
    items = decoder.receive(done.stdout.encode()) + decoder.end_of_input()
    outcome = items[-1]
    assert isinstance(outcome, TurnOutcome) and not outcome.ok
    assert "pwd" in outcome.error


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
    results = [json.loads(x)["result"] for x in proc.stdout.splitlines() if '"event":"result"' in x]
    assert [r["response"] for r in results] == ["One.", "Two."]
    assert len({r["conversation_id"] for r in results}) == 1


# -- the imitated agy version and its output shapes (AGY-FORMATS §2.1, §2.2) ---------------


def test_version_is_selectable(tmp_path: Path) -> None:
    from agy_provider.sim.versions import NEWEST

    assert run_sim(tmp_path / "app", "--version").stdout.strip() == NEWEST
    old = run_sim(tmp_path / "app", "--version", AGY_SIM_VERSION="1.1.17")
    assert old.stdout.strip() == "1.1.17"
    bad = run_sim(tmp_path / "app", "--version", AGY_SIM_VERSION="latest")
    assert bad.returncode == 1 and "AGY_SIM_VERSION" in bad.stderr


def test_new_shapes_compact_json_and_tool_info(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app", "-p", "look", "--output-format", "stream-json", scenario="tools"
    )
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    for line in lines:  # Go's encoding/json: no spaces after separators
        assert line == json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":"))
    events = [json.loads(line) for line in lines]
    assert events[0]["init"]["permission_mode"] == "request-review"
    tools = [
        e["step_update"] for e in events if e.get("step_update", {}).get("step_type") == "tool"
    ]
    done_tools = [t for t in tools if t["state"] == "DONE"]
    assert done_tools[0]["tool_info"]["output"] == "README.md\npyproject.toml\nsrc\ntests\n"
    assert all("output" not in t for t in tools)
    updates = [e["step_update"] for e in events if e["event"] == "step_update"]
    for update in updates:
        if "usage" in update:
            u = update["usage"]
            assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    checkpoint = next(u for u in updates if u["step_type"] == "checkpoint")
    assert checkpoint["usage"]["input_tokens"] == 35 and "duration_seconds" in checkpoint
    assert [u["step_index"] for u in updates[:2]] == [0, 1] and updates[1] is checkpoint
    result = events[-1]["result"]
    assert "error" not in result  # 1.1.18+: only on failure
    agents = sum(
        u["usage"]["input_tokens"]
        for u in updates
        if u["step_type"] == "agent_response" and "usage" in u
    )
    assert result["usage"]["input_tokens"] == agents + 35  # the title call counts too


def test_old_shapes_of_1_1_17(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app",
        "-p",
        "look",
        "--output-format",
        "stream-json",
        "--dangerously-skip-permissions",
        scenario="tools",
        AGY_SIM_VERSION="1.1.17",
    )
    events = stream_events(done.stdout)
    assert events[0]["init"]["permission_mode"] == "bypass-permissions"
    tools = [
        e["step_update"] for e in events if e.get("step_update", {}).get("step_type") == "tool"
    ]
    finished = [t for t in tools if t["state"] == "DONE"]
    assert finished and all("output" in t and "output" not in t["tool_info"] for t in finished)
    checkpoint = next(
        e["step_update"]
        for e in events
        if e.get("step_update", {}).get("step_type") == "checkpoint"
    )
    assert "usage" not in checkpoint
    assert events[-1]["result"]["error"] == ""
    steps = [e["step_update"] for e in events if e["event"] == "step_update"]
    assert steps[-1]["step_type"] == "checkpoint"  # 1.1.17: history at 1, checkpoint last
    assert 1 not in {u["step_index"] for u in steps}  # the history row is not printed


def test_skip_permissions_is_always_proceed(tmp_path: Path) -> None:
    done = run_sim(
        tmp_path / "app", "-p", "pwd", "--output-format", "stream-json",
        "--dangerously-skip-permissions", scenario="permission",
    )  # fmt: skip
    assert stream_events(done.stdout)[0]["init"]["permission_mode"] == "always-proceed"


def test_running_totals_across_turns_of_one_process_and_on_resume(tmp_path: Path) -> None:
    from agy_provider.agy.step import StepUsage
    from agy_provider.agy.step import TurnOutcome
    from agy_provider.agy.streamjson import StreamJsonDecoder

    app = tmp_path / "app"
    user = json.dumps({"event": "user", "message": {"content": "count"}})
    proc = subprocess.run(
        sim_argv("--input-format", "stream-json", "--output-format", "stream-json"),
        env=sim_env(app, "two-turn"),
        input=user + "\n" + user + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    events = stream_events(proc.stdout)
    first, second = [e["result"] for e in events if e["event"] == "result"]
    # Turn 1: 1000 in + the title's 35; turn 2: 1100 in (AGY-FORMATS §2.2: running totals).
    assert first["usage"]["input_tokens"] == 1035 and first["num_turns"] == 1
    assert second["usage"]["input_tokens"] == 1035 + 1100 and second["num_turns"] == 2
    assert second["duration_seconds"] >= first["duration_seconds"]
    kinds = [e["step_update"]["step_type"] for e in events if e["event"] == "step_update"]
    assert "system_message" in kinds  # turn 2 of two-turn has one
    decoder = StreamJsonDecoder()
    outcomes = [i for i in decoder.receive(proc.stdout.encode()) if isinstance(i, TurnOutcome)]
    assert [o.usage for o in outcomes] == [StepUsage(1035, 10), StepUsage(1100, 2, 900)]
    # A new process resuming the conversation reports the whole conversation again.
    [db] = databases(app)
    resumed = run_sim(
        app, "-p", "more", "--conversation", db.stem, "--output-format", "stream-json",
        scenario="two-turn",
    )  # fmt: skip
    third = stream_events(resumed.stdout)[-1]["result"]
    assert third["num_turns"] == 3
    assert third["usage"]["input_tokens"] == 1035 + 1100 + 1100
    assert third["usage"]["cache_read_tokens"] == 1800
    assert third["duration_seconds"] > 0
    fresh = StreamJsonDecoder()
    [outcome] = [i for i in fresh.receive(resumed.stdout.encode()) if isinstance(i, TurnOutcome)]
    assert outcome.usage == StepUsage(1100, 2, 900)  # the step sum: earlier total unknown


def test_stream_input_needs_stream_output_on_1_2(tmp_path: Path) -> None:
    user = json.dumps({"event": "user", "message": {"content": [{"type": "text", "text": "hi"}]}})
    for version, code in (("1.2.13", 2), ("1.1.20", 0)):
        proc = subprocess.run(
            sim_argv("--input-format", "stream-json"),
            env=sim_env(tmp_path / "app", AGY_SIM_VERSION=version),
            input=user + "\n",
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == code, proc.stderr
        assert (proc.stdout == "") == (code == 2)
    bad = subprocess.run(
        sim_argv("--input-format", "stream-json", "--output-format", "stream-json"),
        env=sim_env(tmp_path / "app"),
        input='{"message": {"content": "hi"}}\n',
        capture_output=True,
        text=True,
        timeout=30,
    )
    result = stream_events(bad.stdout)[-1]["result"]
    assert bad.returncode == 1 and result["status"] == "ERROR"
    assert result["error"] == 'stream input message is missing the "event" field'


def test_quota_exhausted_is_a_result_error_with_no_steps(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = run_sim(app, "-p", "hi", "--output-format", "stream-json", scenario="quota-exhausted")
    assert done.returncode == 1
    events = stream_events(done.stdout)
    assert [e["event"] for e in events] == ["init", "result"]
    assert events[-1]["result"]["error"].startswith("Individual quota reached.")
    single = run_sim(app, "-p", "hi", "--output-format", "json", scenario="quota-exhausted")
    assert single.returncode == 1 and json.loads(single.stdout)["status"] == "ERROR"


def test_error_message_and_subagent_steps(tmp_path: Path) -> None:
    app = tmp_path / "app"
    quota = run_sim(app, "-p", "hi", "--output-format", "stream-json", scenario="quota-error")
    updates = [e["step_update"] for e in stream_events(quota.stdout) if e["event"] == "step_update"]
    [error] = [u for u in updates if u["step_type"] == "error_message"]
    assert "RESOURCE_EXHAUSTED" in error["error"]["message"]
    research = run_sim(app, "-p", "research", "--output-format", "stream-json", scenario="subagent")
    updates = [
        e["step_update"] for e in stream_events(research.stdout) if e["event"] == "step_update"
    ]
    subagent = [u for u in updates if u["step_type"] == "subagent"]
    assert [u["state"] for u in subagent] == ["ACTIVE", "DONE"]
    assert subagent[0]["subagent_info"] == subagent[1]["subagent_info"]  # DONE repeats ACTIVE
    [agent] = subagent[0]["subagent_info"]["subagents"]
    assert (
        agent["role"] == "researcher" and agent["initial_prompt"] == "Research the codebase layout"
    )
    child = {db.stem for db in databases(app)} - {
        json.loads(quota.stdout.splitlines()[0])["conversation_id"]
    }
    assert agent["conversation_id"] in child


def test_models_in_each_versions_format(tmp_path: Path) -> None:
    names = run_sim(tmp_path / "app", "models", AGY_SIM_VERSION="1.0.16").stdout.splitlines()
    assert "Gemini 3.8 Flash (High)" in names and not any("\t" in n for n in names)
    slugs = run_sim(tmp_path / "app", "models", AGY_SIM_VERSION="1.1.20").stdout.splitlines()
    assert "gemini-3.8-flash-high" in slugs and "Fetching available models..." not in slugs


def test_effort_max_only_on_1_2(tmp_path: Path) -> None:
    app = tmp_path / "app"
    ok = run_sim(app, "-p", "hi", "--model", "gemini-3.8-flash", "--effort", "max")
    assert ok.returncode == 0, ok.stderr
    old = run_sim(
        app, "-p", "hi", "--model", "gemini-3.8-flash", "--effort", "max", AGY_SIM_VERSION="1.1.20"
    )
    assert old.returncode != 0 and "max" in old.stderr
