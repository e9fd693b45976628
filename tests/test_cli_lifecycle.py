"""The CLI as a process: signals end agy's whole tree, sessions continue, the simulator keeps out of
agy's real state, errors go to stderr and exit codes say what happened.

Every test runs the real `agy-provider` and `agy-sim` executables with HOME pointed at a temporary
folder; expectations come from the scenario files, never from an earlier run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from live_helpers import agy_sim_path
from sim_support import AGY_PROVIDER
from sim_support import STARTUP
from sim_support import cli_env
from sim_support import run_cli

from agy_provider.cli import main
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario

EXIT = 60.0


def sim_state(home: Path) -> Path:
    return home / ".local" / "state" / "agy-provider" / "sim-state"


def scenario_text(name: str) -> str:
    """The answer a one-planner scenario's turn writes."""
    planners = [s for s in load_scenario(name).turns[0].steps if isinstance(s, PlannerSpec)]
    assert len(planners) == 1
    return "".join(planners[0].text)


def assert_no_real_agy_state(home: Path) -> None:
    assert not (home / ".gemini").exists(), sorted(map(str, (home / ".gemini").rglob("*")))


class LineReader:
    """Reads a pipe in a thread, so the test can wait for a line with a timeout."""

    def __init__(self, pipe: io.TextIOBase) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: io.TextIOBase) -> None:
        for line in pipe:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, needle: str, timeout: float) -> None:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no line with {needle!r} within {timeout}s: {self.seen}"
                ) from None
            if line is None:
                raise AssertionError(f"the output ended before {needle!r}: {self.seen}")
            self.seen.append(line)
            if needle in line:
                return

    def rest(self) -> list[str]:
        self._thread.join(EXIT)
        while True:
            line = self.lines.get_nowait() if not self.lines.empty() else None
            if line is None:
                return self.seen
            self.seen.append(line)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    survivors = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                survivors.append(proc)
        except psutil.NoSuchProcess:
            continue
    return survivors


# -- SIGTERM, SIGHUP and SIGINT end agy and its language server ----------------------------------


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"]
)
def test_a_signal_ends_agy_and_its_server_and_the_turn_as_aborted(
    tmp_path: Path, signum: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [AGY_PROVIDER, "chat", "hi", "--agy-bin", "agy-sim", "--format", "events"],
        env=cli_env(tmp_path, AGY_SIM_SCENARIO="hang", AGY_EVENT_SOURCE="rpc"),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout = LineReader(proc.stdout)  # type: ignore[arg-type]
        stderr = LineReader(proc.stderr)  # type: ignore[arg-type]
        # The hang scenario streams part of its answer, then hangs with agy and its server alive.
        stdout.wait_for('"text_delta"', STARTUP)
        tree = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in tree]
        assert any("agy-sim" in c and " -p " in f" {c} " for c in commands), commands
        assert len(tree) >= 2, commands  # agy-sim and its language server
        proc.send_signal(signum)
        code = proc.wait(EXIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signum
    lines = stdout.rest()
    last = json.loads(lines[-1])
    assert (last["type"], last["reason"]) == ("error", "aborted"), lines[-3:]
    assert sum(json.loads(line)["type"] in ("done", "error") for line in lines) == 1
    err = "".join(stderr.rest())
    assert f"{signum.name} received" in err and "Traceback" not in err
    # Nothing of the turn's tree may outlive it (psutil knows each process by pid and start time).
    deadline = time.monotonic() + EXIT
    while alive(tree) and time.monotonic() < deadline:
        psutil.wait_procs(alive(tree), timeout=0.5)
    assert not alive(tree), [(p.pid, p.cmdline()) for p in alive(tree)]
    assert_no_real_agy_state(tmp_path)


def test_sigterm_during_agys_cold_start_ends_the_tree_too(tmp_path: Path) -> None:
    # The slow scenario takes its time before the first token: signal as soon as agy exists.
    proc = subprocess.Popen(
        [AGY_PROVIDER, "chat", "hi", "--agy-bin", "agy-sim", "--format", "events"],
        env=cli_env(tmp_path, AGY_SIM_SCENARIO="slow", AGY_SIM_SPEED="1"),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        cli = psutil.Process(proc.pid)
        deadline = time.monotonic() + STARTUP
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline and not any(
            " -p " in f" {' '.join(p.cmdline())} " for p in tree
        ):
            time.sleep(0.02)
            with contextlib.suppress(psutil.Error):
                tree = cli.children(recursive=True)
        assert tree, "agy-sim never started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=EXIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    last = json.loads(out.splitlines()[-1])
    assert (last["type"], last["reason"]) == ("error", "aborted")
    assert "Traceback" not in err
    tree = [*tree, *_children_of(tree)]
    deadline = time.monotonic() + EXIT
    while alive(tree) and time.monotonic() < deadline:
        psutil.wait_procs(alive(tree), timeout=0.5)
    assert not alive(tree), [(p.pid, p.cmdline()) for p in alive(tree)]


def _children_of(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Whatever the processes started since they were listed (a language server coming up)."""
    found = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            found += proc.children(recursive=True)
    return found


# -- chat --session continues one conversation ----------------------------------------------------


def test_chat_session_continues_one_conversation_sending_only_the_new_prompt(
    tmp_path: Path,
) -> None:
    prompts = ["What is in this folder?", "And what did you just say?"]
    for prompt in prompts:
        result = run_cli(
            tmp_path, "chat", prompt, "--agy-bin", "agy-sim", "--session", "S", "--format", "events"
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["type"] == "done"
    databases = sorted((sim_state(tmp_path) / "conversations").glob("*.db"))
    assert len(databases) == 1, databases
    steps = run_cli(tmp_path, "replay", str(databases[0]), "--format", "steps", "--turn", "all")
    assert steps.returncode == 0, steps.stderr
    users = [s["text"] for s in map(json.loads, steps.stdout.splitlines()) if s["kind"] == "user"]
    assert users == prompts  # the second turn carried its prompt alone, no preamble
    assert_no_real_agy_state(tmp_path)


# -- the simulator never writes into the real agy's state ----------------------------------------


def test_chat_with_agy_sim_uses_its_own_state_folder_and_says_where(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "chat", "hi", "--agy-bin", agy_sim_path())
    assert result.returncode == 0, result.stderr
    assert scenario_text("default") in result.stdout
    assert f"agy-sim keeps its conversations in {sim_state(tmp_path)}" in result.stderr
    assert len(list((sim_state(tmp_path) / "conversations").glob("*.db"))) == 1
    assert_no_real_agy_state(tmp_path)


def test_an_explicit_state_folder_is_honoured(tmp_path: Path) -> None:
    chosen = tmp_path / "mine"
    result = run_cli(
        tmp_path, "chat", "hi", "--agy-bin", "agy-sim", ANTIGRAVITY_APP_DATA_DIR=str(chosen)
    )
    assert result.returncode == 0, result.stderr
    assert f"agy-sim keeps its conversations in {chosen}" in result.stderr
    assert len(list((chosen / "conversations").glob("*.db"))) == 1
    assert not sim_state(tmp_path).exists()
    assert_no_real_agy_state(tmp_path)


def test_the_demo_without_agy_uses_the_simulator_and_its_own_state(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    assert "using the bundled simulator agy-sim" in result.stderr
    assert f"agy-sim keeps its conversations in {sim_state(tmp_path)}" in result.stderr
    assert scenario_text("default") in result.stdout
    assert len(list((sim_state(tmp_path) / "conversations").glob("*.db"))) == 1
    assert_no_real_agy_state(tmp_path)


def test_agy_sim_alone_keeps_out_of_the_real_agy_state(tmp_path: Path) -> None:
    env = cli_env(tmp_path, AGY_SIM_NO_SERVER="1")
    run = subprocess.run(
        [agy_sim_path(), "-p", "hi"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STARTUP,
    )
    assert run.returncode == 0, run.stderr
    assert len(list((sim_state(tmp_path) / "conversations").glob("*.db"))) == 1
    assert_no_real_agy_state(tmp_path)
    # XDG_STATE_HOME moves it; --gemini_dir (the user pointing there) is obeyed.
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    for args, where in (
        ([], tmp_path / "xdg" / "agy-provider" / "sim-state"),
        ([f"--gemini_dir={tmp_path / 'g'}"], tmp_path / "g" / "antigravity-cli"),
    ):
        run = subprocess.run(
            [agy_sim_path(), "-p", "hi", *args],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=STARTUP,
        )
        assert run.returncode == 0, run.stderr
        assert len(list((where / "conversations").glob("*.db"))) == 1, where
    assert_no_real_agy_state(tmp_path)


# -- errors on stderr, exit codes ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-3", "0"])
def test_a_bad_timeout_is_a_usage_error_with_exit_code_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_IDLE_TIMEOUT", value)
    out, err = io.StringIO(), io.StringIO()
    code = main(["chat", "hi", "--agy-bin", "agy-sim"], out=out, err=err)
    assert code == 2
    assert out.getvalue() == ""
    assert "idle_timeout" in err.getvalue() and "greater than 0" in err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert "AGY_APP_DATA_DIR" not in os.environ  # the CLI restores the environment it changed


def test_a_failed_turn_exits_1_with_the_error_on_stderr(tmp_path: Path) -> None:
    events = run_cli(
        tmp_path,
        "chat",
        "hi",
        "--agy-bin",
        "agy-sim",
        "--format",
        "events",
        AGY_SIM_SCENARIO="quota-error",
    )
    assert events.returncode == 1
    last = json.loads(events.stdout.splitlines()[-1])
    assert (last["type"], last["reason"]) == ("error", "error")
    assert last["error"]["errorMessage"] in events.stderr
    text = run_cli(tmp_path, "chat", "hi", "--agy-bin", "agy-sim", AGY_SIM_SCENARIO="quota-error")
    assert text.returncode == 1
    # The second run is a turn of its own: the wall-clock time its quota resets at may be a
    # minute later, so only agy's own words must be the same.
    words = last["error"]["errorMessage"].split(" (the quota resets at ")[0]
    assert words.startswith("agy ended the turn with ERROR: ")
    assert words in text.stderr
    assert words not in text.stdout  # errors never on stdout for people
    assert "Traceback" not in events.stderr + text.stderr


def test_an_unwritable_session_store_loses_no_turn(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"  # a store under a file: neither readable nor writable
    blocker.write_text("")
    result = run_cli(
        tmp_path,
        "chat",
        "hi",
        "--agy-bin",
        "agy-sim",
        "--session",
        "S",
        AGY_PROVIDER_SESSIONS=str(blocker / "sessions.json"),
    )
    assert result.returncode == 0, result.stderr
    assert scenario_text("default") in result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.count(str(blocker / "sessions.json")) <= 2  # reading, writing: once each
    assert "could not save session 'S'" in result.stderr
