"""Every `agy-provider` command as a person runs it: real processes, agy-sim as agy, the real
fixture databases, and a terminal (a pty, or tmux where the screen matters).

Expectations come from the scenario files and the fixtures' own records (`sim/record.py`),
never from an earlier run. HOME is a temporary folder in every test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FIXTURES
from live_helpers import scenario_answer

from agy_provider.cli import build_parser
from agy_provider.cli import main
from agy_provider.sim.record import FIXTURES as RECORDED
from agy_provider.sim.scenario import load_scenario

AGY_PROVIDER = os.path.join(os.path.dirname(sys.executable), "agy-provider")
AGY_SIM = os.path.join(os.path.dirname(sys.executable), "agy-sim")
ROOT = Path(__file__).resolve().parent.parent
DB = FIXTURES / "db"
# Generous: a busy 2-core machine can take seconds to start Python, agy-sim and its server.
TIMEOUT = 180.0


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGY_", "ANTIGRAVITY_", "XDG_", "NO_COLOR"))
        and k != "PYTEST_CURRENT_TEST"
    }
    env.update(HOME=str(home), AGY_SIM_SPEED="4", PATH="/usr/bin:/bin")
    env.update(extra)
    return env


def run(
    home: Path, *args: str, stdin: str | None = None, cwd: Path | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGY_PROVIDER, *args],
        env=env_for(home, **extra),
        cwd=cwd or home,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def ours(home: Path) -> list[str]:
    """Processes still alive that were started with this test's HOME (agy-sim and its server)."""
    alive = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("HOME") == str(home) and proc.pid != os.getpid():
                alive.append(" ".join(proc.info["cmdline"] or []))
    return alive


def subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)  # type: ignore[arg-type]


# -- help and the README ------------------------------------------------------------------------


def test_the_readme_shows_every_command_with_its_output() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = readme[readme.index("## Commands") : readme.index("## Using it from Python")]
    for name in subcommands():
        assert f"agy-provider {name}" in commands, f"README's Commands section lacks {name}"
    # Output a person can compare: each command is shown run (`$ …`) with what it prints.
    for name in subcommands():
        assert f"$ agy-provider {name}" in commands, f"README shows no output of {name}"


@pytest.mark.parametrize("name", [None, *subcommands()])
def test_help_everywhere_has_an_example(name: str | None) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([name, "--help"] if name else ["--help"])
    assert stop.value.code == 0
    assert "examples:\n  agy-provider" in out.getvalue()


# -- status and doctor --------------------------------------------------------------------------


@pytest.mark.slow
def test_status_reports_agy_its_sign_in_settings_sessions_and_sources(tmp_path: Path) -> None:
    done = run(tmp_path, "status", "--agy-bin", "agy-sim")
    assert done.returncode == 0, done.stderr
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in done.stdout.splitlines())
    version = subprocess.run([AGY_SIM, "--version"], capture_output=True, text=True).stdout
    assert rows["agy"] == f"{AGY_SIM} ({version.strip()})"
    assert rows["signed in"].startswith("yes (")
    assert "not created: defaults" in rows["config"]
    assert rows["sessions"].startswith("0 in ")
    assert rows["event sources"] == "rpc, sqlite, stream-json (configured: auto)"
    as_json = json.loads(run(tmp_path, "status", "--agy-bin", "agy-sim", "--json").stdout)
    assert as_json["problems"] == 0 and as_json["rows"]["agy"] == rows["agy"]


def test_status_without_agy_says_so_and_fails(tmp_path: Path) -> None:
    done = run(tmp_path, "status", "--agy-bin", str(tmp_path / "no-agy"))
    assert done.returncode == 1
    assert "not found" in done.stdout and "agy-sim" in done.stdout  # the hint names the way out


@pytest.mark.slow
def test_doctor_probes_the_simulators_language_server_and_leaves_nothing(tmp_path: Path) -> None:
    done = run(tmp_path, "doctor", "--agy-bin", "agy-sim", "--json")
    checks = {c["name"]: c for c in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0, done.stdout + done.stderr
    server = checks["language server"]
    assert server["state"] == "ok" and server["detail"].startswith("Heartbeat answered at http")
    assert checks["signed in"]["state"] == "ok"
    assert checks["databases"]["state"] == "skip"  # no conversations yet
    assert ours(tmp_path) == []
    assert not (tmp_path / ".gemini").exists()


def test_doctor_says_how_to_fix_what_fails(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "conversations"
    folder.mkdir(parents=True)
    shutil.copy(DB / "tool-run.db", folder / "good.db")
    (folder / "broken.db").write_bytes(b"this is not a database" * 10)
    done = run(
        tmp_path,
        "doctor",
        "--agy-bin",
        str(tmp_path / "missing-agy"),
        AGY_APP_DATA_DIR=str(tmp_path / "state"),
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    agy = lines.index(next(line for line in lines if line.startswith("✗ agy:")))
    assert lines[agy + 1].startswith("    fix: Install Google's Antigravity CLI")
    broken = next(line for line in lines if line.startswith("✗ databases:"))
    assert "1 of 2 unreadable" in broken and "broken.db" in broken
    assert "fix: `agy-provider replay PATH --format steps`" in done.stdout
    assert "check(s) failed: agy, databases" in done.stderr
    assert (folder / "broken.db").read_bytes() == b"this is not a database" * 10


# -- config and sessions ------------------------------------------------------------------------


def test_config_shows_sets_checks_and_unsets(tmp_path: Path) -> None:
    assert "mode = default" in run(tmp_path, "config").stdout
    assert run(tmp_path, "config", "mode", "accept-edits").returncode == 0
    assert run(tmp_path, "config", "mode").stdout == "accept-edits\n"
    file = tmp_path / ".config" / "agy-provider" / "config.json"
    assert json.loads(file.read_text()) == {"mode": "accept-edits"}
    bad = run(tmp_path, "config", "turn_timeout", "nan")
    assert bad.returncode == 2 and "turn_timeout must be a number of seconds" in bad.stderr
    unknown = run(tmp_path, "config", "colour", "on")
    assert unknown.returncode == 2 and "no setting 'colour'" in unknown.stderr
    # The environment wins for one run, and the listing says where a value came from.
    assert "mode = plan  (from AGY_MODE)" in run(tmp_path, "config", AGY_MODE="plan").stdout
    assert json.loads(file.read_text()) == {"mode": "accept-edits"}  # never written to the file
    assert run(tmp_path, "config", "--unset", "mode").returncode == 0
    assert run(tmp_path, "config", "mode").stdout == "default\n"


def test_sessions_list_and_clear(tmp_path: Path) -> None:
    store = tmp_path / "sessions.json"
    record = {"conversation_id": "0a97854e-f5d3-4895-bef6-7a54978e26c9", "updated_at": 1.0}
    store.write_text(json.dumps({"version": 1, "sessions": {"a": record, "b": record}}))
    listed = run(tmp_path, "sessions", AGY_PROVIDER_SESSIONS=str(store))
    assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
        ["a", record["conversation_id"]],
        ["b", record["conversation_id"]],
    ]
    assert run(tmp_path, "sessions", "clear", "a", AGY_PROVIDER_SESSIONS=str(store)).returncode == 0
    assert list(json.loads(store.read_text())["sessions"]) == ["b"]
    missing = run(tmp_path, "sessions", "clear", "zzz", AGY_PROVIDER_SESSIONS=str(store))
    assert missing.returncode == 2 and "no session 'zzz'" in missing.stderr
    assert (
        run(tmp_path, "sessions", "clear", "--all", AGY_PROVIDER_SESSIONS=str(store)).returncode
        == 0
    )
    assert json.loads(store.read_text())["sessions"] == {}


# -- conversations and export -------------------------------------------------------------------


def _fixtures_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "conversations"
    folder.mkdir()
    for db in DB.glob("*.db"):
        shutil.copy(db, folder / db.name)
    return folder


def test_conversations_lists_title_date_model_turns_and_tokens(tmp_path: Path) -> None:
    folder = _fixtures_copy(tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    done = run(tmp_path, "conversations", "--folder", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    rows = {Path(r["path"]).stem: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(rows) == {f.name for f in RECORDED}
    for fixture in RECORDED:
        row = rows[fixture.name]
        assert row["turns"] == len(fixture.prompts), fixture.name
        assert row["error"] == ""
    for name in ("simple-thinking", "two-turn", "tool-run"):
        scenario = next(f.scenario for f in RECORDED if f.name == name)
        assert rows[name]["title"] == load_scenario(scenario).title
        assert rows[name]["tokens"] > 0 and rows[name]["model"]
    text = run(tmp_path, "conversations", "--folder", str(folder)).stdout
    assert re.search(r"Counting  \[[^\]]+ · 2 turns · \d+ tokens\]", text), text
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # read-only


@pytest.mark.parametrize("fmt", ["markdown", "jsonl"])
def test_export_writes_every_conversation(tmp_path: Path, fmt: str) -> None:
    folder = _fixtures_copy(tmp_path)
    dest = tmp_path / "out"
    done = run(
        tmp_path, "export", str(dest), "--format", fmt, "--folder", str(folder), "--jobs", "2"
    )
    assert done.returncode == 0, done.stderr
    suffix = ".md" if fmt == "markdown" else ".jsonl"
    assert sorted(p.name for p in dest.iterdir()) == sorted(f.name + suffix for f in RECORDED)
    for fixture in RECORDED:
        text = (dest / (fixture.name + suffix)).read_text()
        if fmt == "jsonl":
            rows = [json.loads(line) for line in text.splitlines()]
            assert [r["user"] for r in rows] == list(fixture.prompts)
            assert all(r["message"]["role"] == "assistant" for r in rows)
        else:
            assert text.startswith("# ") and text.count("## Turn ") == len(fixture.prompts)
    two = (dest / ("two-turn" + suffix)).read_text()
    assert scenario_answer("two-turn", 1) in two
    inside = run(tmp_path, "export", str(folder / "x"), "--folder", str(folder))
    assert inside.returncode == 2 and "agy's files are never written" in inside.stderr


def test_export_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    folder = _fixtures_copy(tmp_path)
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            [AGY_PROVIDER, "export", str(tmp_path / "out"), "--folder", str(folder)],
            env=env_for(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
        )
        os.close(secondary)
        screen = b""
        while True:
            ready, _, _ = select.select([primary], [], [], TIMEOUT)
            if not ready:
                break
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the pty's other end closed
                break
            if not chunk:
                break
            screen += chunk
        assert proc.wait(TIMEOUT) == 0
    finally:
        os.close(primary)
    total = len(RECORDED)
    assert f"] {total}/{total}".encode() in screen
    assert b"\rexporting [" in screen and b"##############################" in screen


# -- chat ---------------------------------------------------------------------------------------


def _conversation_turns(home: Path) -> list[int]:
    state = home / ".local" / "state" / "agy-provider" / "sim-state" / "conversations"
    done = run(home, "conversations", "--folder", str(state), "--json")
    return sorted(json.loads(line)["turns"] for line in done.stdout.splitlines())


@pytest.mark.slow
def test_chat_reads_stdin_continues_with_c_and_sends_a_system_prompt(tmp_path: Path) -> None:
    first = run(
        tmp_path, "chat", "-", "--system", "Answer like a pirate.", "--agy-bin", "agy-sim",
        stdin="hi from stdin",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert scenario_answer("default") in first.stdout
    again = run(tmp_path, "chat", "-c", "and again", "--system", "Ignored.", "--agy-bin", "agy-sim")
    assert again.returncode == 0, again.stderr
    assert "--system applies to a new conversation; not sent" in again.stderr
    assert _conversation_turns(tmp_path) == [2]  # one conversation, two turns
    fresh = run(tmp_path, "chat", "a new one", "--agy-bin", "agy-sim")
    assert fresh.returncode == 0 and _conversation_turns(tmp_path) == [1, 2]
    state = tmp_path / ".local" / "state" / "agy-provider" / "sim-state" / "conversations"
    oldest = min(state.glob("*.db"), key=lambda p: p.stat().st_mtime)
    steps = run(tmp_path, "replay", str(oldest), "--format", "steps", "--turn", "all").stdout
    users = [json.loads(s)["text"] for s in steps.splitlines() if json.loads(s)["kind"] == "user"]
    assert users[0] == "<system>\nAnswer like a pirate.\n</system>\n\nhi from stdin"
    assert users[1] == "and again"  # a continued turn sends only the new prompt
    assert ours(tmp_path) == []


def test_chat_usage_errors_say_what_to_do(tmp_path: Path) -> None:
    empty = run(tmp_path, "chat", "-", stdin="  \n")
    assert empty.returncode == 2 and "pipe it in with -" in empty.stderr
    both = run(tmp_path, "chat", "-c", "--session", "s", "hi")
    assert both.returncode == 2 and "either -c/--continue or --session" in both.stderr
    missing = run(tmp_path, "chat", "hi", "--agy-bin", str(tmp_path / "no-agy"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert "--agy-bin agy-sim" in missing.stderr


@pytest.mark.slow
def test_chat_verbose_logs_the_turn_on_stderr(tmp_path: Path) -> None:
    done = run(tmp_path, "chat", "hi", "-v", "--agy-bin", "agy-sim")
    assert done.returncode == 0
    logged = [line for line in done.stderr.splitlines() if line.startswith("agy-provider: agy_")]
    assert logged, done.stderr
    assert scenario_answer("default") in done.stdout
    quiet = run(tmp_path, "chat", "hi", "--agy-bin", "agy-sim")
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("agy-provider: agy_")]


def _pty_chat(home: Path, *args: str, **extra: str) -> bytes:
    """Run chat with stdout and stderr on one pty; returns every byte the terminal got."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.chdir(home)
        os.execve(AGY_PROVIDER, [AGY_PROVIDER, "chat", *args], env_for(home, TERM="xterm", **extra))
    got = b""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return got


@pytest.mark.slow
def test_no_color_turns_colour_off_on_a_terminal(tmp_path: Path) -> None:
    coloured = _pty_chat(tmp_path, "hi", "--agy-bin", "agy-sim")
    assert b"\x1b[2m" in coloured  # thinking dimmed on a terminal
    plain = _pty_chat(tmp_path, "hi", "--agy-bin", "agy-sim", NO_COLOR="1")
    assert scenario_answer("default").encode() in plain
    assert not re.search(rb"\x1b\[[0-9;]*m", plain), plain


def _tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, timeout=60, check=False
    ).stdout


def _wait_for_screen(session: str, text: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-J", "-t", session)
        if text in screen:
            return screen
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared on the screen:\n{screen}")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize(
    ("redirected", "piped"),
    [(False, False), (True, False), (True, True)],
    ids=["stdout-on-terminal", "stdout-to-file", "prompt-piped-in"],
)
def test_a_permission_prompt_is_seen_and_answered_on_the_terminal(
    tmp_path: Path, redirected: bool, piped: bool
) -> None:
    # The built-in scenario's 8 s auto-denial is too short for a busy machine: the same one,
    # waiting two minutes for the person.
    scenario = json.loads((ROOT / "agy_provider/sim/scenarios/permission.json").read_text())
    scenario["turns"][0]["steps"][0]["tools"][0]["permission"]["timeout_ms"] = 120_000
    (tmp_path / "perm-long.json").write_text(json.dumps(scenario))
    session = f"agyp-{os.getpid()}-{int(redirected)}{int(piped)}"
    env = " ".join(
        f"{k}={v}"
        for k, v in env_for(tmp_path, AGY_SIM_SCENARIO="perm-long.json").items()
        if k in ("HOME", "PATH", "AGY_SIM_SPEED", "AGY_SIM_SCENARIO")
    )
    target = " > out.txt" if redirected else ""
    # A piped prompt takes stdin: the answer must then come from the terminal itself.
    feed, prompt = ("echo 'where am I?' | ", "-") if piped else ("", "'where am I?'")
    command = (
        f"cd {tmp_path} && {feed}env -i TERM=xterm {env} {AGY_PROVIDER} chat {prompt} "
        f"--agy-bin agy-sim{target}; echo EXIT=$?; sleep 600"
    )
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", command)
    try:
        screen = _wait_for_screen(session, "Allow? [y/N]")
        question = next(line for line in screen.splitlines() if "Allow? [y/N]" in line)
        assert question.startswith("agy wants to run command `pwd`"), screen
        assert "agy is starting" not in screen  # the spinner left nothing behind
        _tmux("send-keys", "-t", session, "y", "Enter")
        screen = _wait_for_screen(session, "EXIT=")
        assert "EXIT=0" in screen
        if redirected:
            shown = (tmp_path / "out.txt").read_text()
            assert "▸ run_command pwd\n  exit 0\n  /tmp/project" in shown
        else:
            # On the terminal the question sits on its own line between the tool and its result.
            shown = screen
            assert "▸ run_command pwd\nagy wants to run command `pwd`" in shown
            assert "Allow? [y/N] y\n  exit 0\n  /tmp/project" in shown
        assert scenario_answer("permission") in shown
    finally:
        _tmux("kill-session", "-t", session)
    assert ours(tmp_path) == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_first_line_on_a_terminal_is_the_answer_not_the_spinner(tmp_path: Path) -> None:
    session = f"agyp-spin-{os.getpid()}"
    command = (
        f"cd {tmp_path} && env -i TERM=xterm HOME={tmp_path} PATH=/usr/bin:/bin "
        f"AGY_SIM_SPEED=1 {AGY_PROVIDER} chat hi --agy-bin agy-sim 2>/dev/tty; echo EXIT=$?; "
        "sleep 600"
    )
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", command)
    try:
        screen = _wait_for_screen(session, "EXIT=")
    finally:
        _tmux("kill-session", "-t", session)
    lines = [line for line in screen.splitlines() if line.strip()]
    # Line 1 is the note about the simulator's folder (stderr); the turn starts right after.
    assert lines[0].startswith("agy-sim keeps its conversations in")
    thinking = load_scenario("default").turns[0].steps[0].thinking[0]  # type: ignore[union-attr]
    assert lines[1].startswith(thinking[:20]), screen
    assert "agy is starting" not in screen and "⠋" not in screen


@pytest.mark.slow
def test_a_live_turns_edits_are_diffed_against_head(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "start"]):
        subprocess.run(
            ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
            cwd=repo, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    notes = str(repo / "notes.txt")

    def tool(name: str, args: dict[str, object], output: str) -> dict[str, object]:
        return {"name": name, "args": args, "output": output, "tool_action": "Edit",
                "tool_summary": "Edit"}  # fmt: skip

    scenario = {
        "name": "edits",
        "title": "Edits",
        "turns": [{"steps": [
            {"type": "planner", "thinking": ["Editing."],
             "usage": {"input": 10, "thinking": 1, "response": 1, "cache_read": 0},
             "tools": [
                 tool("replace_file_content", {"TargetFile": notes, "TargetContent": "beta",
                      "ReplacementContent": "BETA", "StartLine": 2, "EndLine": 2}, "Edited"),
                 tool("multi_replace_file_content", {"TargetFile": notes, "ReplacementChunks": [
                      {"TargetContent": "gamma", "ReplacementContent": "GAMMA"}]}, "Edited"),
                 tool("write_to_file", {"TargetFile": str(repo / "new.py"),
                      "CodeContent": "print('new')\n", "Overwrite": False}, "Created"),
             ]},
            {"type": "planner", "text": ["Edited."],
             "usage": {"input": 10, "thinking": 0, "response": 1, "cache_read": 0}},
        ]}],
    }  # fmt: skip
    (repo / "edits.json").write_text(json.dumps(scenario))
    done = run(tmp_path, "chat", "edit", "--agy-bin", "agy-sim", cwd=repo,
               AGY_SIM_SCENARIO="edits.json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = (
        f"▸ replace_file_content {notes}\n  --- a/notes.txt\n  +++ b/notes.txt\n"
        "  @@ -1,3 +1,3 @@\n   alpha\n  -beta\n  +BETA\n   gamma\n"
    )
    # The second edit starts from what the first left (BETA), not from HEAD.
    second = "  @@ -1,3 +1,3 @@\n   alpha\n   BETA\n  -gamma\n  +GAMMA\n"
    third = "  --- /dev/null\n  +++ b/new.py\n  @@ -0,0 +1 @@\n  +print('new')\n"
    for part in (first, second, third):
        assert part in done.stdout, done.stdout
    # Replay reads HEAD the same way.
    state = tmp_path / ".local" / "state" / "agy-provider" / "sim-state" / "conversations"
    (db,) = state.glob("*.db")
    replayed = run(tmp_path, "replay", str(db), "--format", "transcript", cwd=repo)
    for part in (first, second, third):
        assert part in replayed.stdout, replayed.stdout


@pytest.mark.parametrize(
    "argv",
    [["conversations", "--folder", str(DB)], ["config"], ["sessions"]],
    ids=["conversations", "config", "sessions"],
)
def test_offline_commands_never_load_the_live_path(argv: list[str], tmp_path: Path) -> None:
    probe = (
        "import io, sys\n"
        "before = set(sys.modules)\n"
        "from agy_provider.cli import main\n"
        f"main({argv!r}, out=io.StringIO(), err=io.StringIO())\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
        env=env_for(tmp_path), check=True,
    )  # fmt: skip
    loaded = set(done.stdout.split())
    assert not loaded & {"asyncio", "httpx", "psutil", "pluggy", "agy_provider.cli.chat_turn"}, (
        loaded
    )
