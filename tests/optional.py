"""The optional packages the tests drive, all installed by the README's first command (the `test`
extra), and pi-ai-client's own folder, installed on first use: a missing one skips, saying how.

Every skip names the command that brings the package back, so a skipped tier is one command away.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PI_AI_CLIENT_HOME", "install_command", "need", "pi_ai_client_home"]

# pi-ai-client's import name `pi_ai` is also pi-ai-python's (extra `hosts`), so the two cannot
# share site-packages: pi-ai-client and pi-agent-loop live in this folder of the venv, and their
# tests run in a child Python with it first on its path. Their other requirements (pydantic,
# httpx, jsonschema) are the package's own or its extras'.
PI_AI_CLIENT = ("pi-ai-client==0.1.1", "pi-agent-loop==0.1.0")
PI_AI_CLIENT_HOME = Path(sys.prefix) / "hosts" / "pi-ai-client"
_PI_AI_CLIENT_MARKS = ("pi_ai/registry.py", "pi_agent_loop/abort.py")


def install_command(extra: str) -> str:
    """The command that installs extra `extra` into this checkout's venv (README's layout)."""
    return f".venv/bin/pip install -e '.[{extra}]'"


def need(module: str, package: str, extra: str) -> Any:
    """`module`, or a skip saying `package` is missing and how to install it."""
    return pytest.importorskip(
        module, reason=f"{package} is not installed; to run this: {install_command(extra)}"
    )


def _manual_command() -> str:
    return f"{sys.executable} -m pip install --no-deps --target {PI_AI_CLIENT_HOME} " + " ".join(
        PI_AI_CLIENT
    )


def _installed() -> bool:
    return all((PI_AI_CLIENT_HOME / mark).is_file() for mark in _PI_AI_CLIENT_MARKS)


def pi_ai_client_home() -> Path:
    """The folder holding pi-ai-client and pi-agent-loop, installed from the package index the
    first time a test asks (under a lock: two pytest workers may ask at once); a skip saying why
    and what to run when it cannot be."""
    if _installed():
        return PI_AI_CLIENT_HOME
    parent = PI_AI_CLIENT_HOME.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(parent / ".pi-ai-client.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        pytest.skip(
            f"pi-ai-client cannot be installed in {parent} ({exc}); run {_manual_command()}"
        )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed():
            _install(parent)
    finally:
        os.close(lock)  # releases the lock
    return PI_AI_CLIENT_HOME


def _install(parent: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".pi-ai-client-", dir=parent))
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(staging),
                *PI_AI_CLIENT,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            pytest.skip(f"pi-ai-client could not be installed ({last}); run {_manual_command()}")
        # Whole or not at all: a half-installed folder from an interrupted run goes first.
        shutil.rmtree(PI_AI_CLIENT_HOME, ignore_errors=True)
        os.replace(staging, PI_AI_CLIENT_HOME)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
