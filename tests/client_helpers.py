"""What the real-client tiers share: the token, the shell's tell-tale output, and a client run as
a user's machine would run it (its own HOME, nothing of this machine's keys)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import ServeProcess

TOKEN = "real-client-tier-" + "t" * 24


SHELL_SAID = "agy-sim-42"  # what `echo agy-sim-$((6 * 7))` prints, in a real shell only


SHELL_ANSWER = "The client's shell printed: "


RUN_TIMEOUT = 240


# What a user's own machine has, and nothing of this one's keys or settings.
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")


def client_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSED_ON if k in os.environ}
    return {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return done


@pytest.fixture(name="serve")
def serve_fixture(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`agy-provider serve` as a process on 127.0.0.1 with the tier's token; its base URL (no
    /v1). Import it into a test module to use it (`live_env` comes from conftest)."""
    monkeypatch.setenv("AGY_SIM_SPEED", "20")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGY_PROVIDER_SERVE_TOKEN": TOKEN}
    server = ServeProcess(env)
    try:
        yield server.base
    finally:
        server.proc.terminate()
        server.proc.communicate(timeout=120)


@pytest.fixture(name="folders")
def folders_fixture(tmp_path: Path) -> tuple[Path, Path]:
    """A client's own HOME and working folder."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work
