"""A host as a real Python process that may be killed outright, its lifeline, and what of its turn
is still alive: shared by the lifeline's and the owned folders' tests. "Gone" is polled with a bound.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from live_helpers import scenario_planners

# The bound: nothing of a killed host's turns is alive this long after it died.
GONE_WITHIN = 2.0
# Generous: a busy 2-core machine can take seconds to start Python, agy-sim and its server.
STARTUP = 90.0


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    survivors = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                survivors.append(proc)
    return survivors


def gone_within(processes: list[psutil.Process], bound: float) -> list[psutil.Process]:
    """Those of `processes` still alive after polling for at most `bound` seconds."""
    deadline = time.monotonic() + bound
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive(processes)


@contextlib.contextmanager
def host(script: str, env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A host process running `script`; it and anything it leaves are killed afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def read_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"the host ended first: {proc.stderr.read() if proc.stderr else ''}"
        if line.startswith(prefix):
            return line[len(prefix) :].strip()


def lifeline_of(host_pid: int) -> psutil.Process:
    (found,) = [
        p
        for p in psutil.Process(host_pid).children()
        if "agy_provider.lifeline" in " ".join(p.cmdline())
    ]
    return found


def turn_env(tmp_path: Path) -> dict[str, str]:
    app = tmp_path / "agy-state"
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGY_", "ANTIGRAVITY_"))}
    env.update(
        AGY_APP_DATA_DIR=str(app),
        ANTIGRAVITY_APP_DATA_DIR=str(app),
        AGY_PROVIDER_CONFIG=str(tmp_path / "config.json"),
        AGY_PROVIDER_SESSIONS=str(tmp_path / "sessions.json"),
        AGY_BIN=os.path.join(os.path.dirname(sys.executable), "agy-sim"),
        AGY_SIM_SCENARIO="hang",
        AGY_EVENT_SOURCE="sqlite",
        AGY_SIM_SPEED="4",
        AGY_PROVIDER_PLUGINS="",
        TMPDIR=str(temp),
        HANG_TEXT=scenario_planners("hang")[0],  # the hang comes before the next
    )
    return env
