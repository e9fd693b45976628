"""The optional packages the tests drive, all installed by the README's first command (the `test`
extra), and those that need a folder of their own, installed there on first use: a missing one
skips, saying how.

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

__all__ = [
    "INSTRUCTOR",
    "PI_AI_CLIENT",
    "OwnFolder",
    "install_command",
    "need",
    "own_folder",
    "own_folder_env",
]


class OwnFolder:
    """Packages that cannot share the venv's site-packages, in a folder of the venv of their own
    (`.venv/hosts/<name>`); their tests run a child Python with it first on its path."""

    def __init__(
        self, name: str, requirements: tuple[str, ...], marks: tuple[str, ...], *, deps: bool
    ) -> None:
        self.name = name
        self.requirements = requirements
        self.marks = marks  # files that show the folder is whole
        self.deps = deps  # whether they bring their own dependencies
        self.home = Path(sys.prefix) / "hosts" / name

    def pip_options(self) -> tuple[str, ...]:
        return (
            ("--target", str(self.home)) if self.deps else ("--no-deps", "--target", str(self.home))
        )

    def manual_command(self) -> str:
        return " ".join(
            [sys.executable, "-m", "pip", "install", *self.pip_options(), *self.requirements]
        )

    def installed(self) -> bool:
        return all((self.home / mark).is_file() for mark in self.marks)


# pi-ai-client's import name `pi_ai` is also pi-ai-python's (extra `hosts`): pi-ai-client and
# pi-agent-loop live in a folder of their own. Their other requirements (pydantic, httpx,
# jsonschema) are the package's own or its extras'.
PI_AI_CLIENT = OwnFolder(
    "pi-ai-client",
    ("pi-ai-client==0.1.1", "pi-agent-loop==0.1.0"),
    ("pi_ai/registry.py", "pi_agent_loop/abort.py"),
    deps=False,
)
# instructor 1.17 pins `jiter<0.15`, which only `openai<=3.3` accepts, below the pi hosts' floor:
# it lives in a folder of its own with its own dependencies.
INSTRUCTOR = OwnFolder(
    "instructor", ("instructor==1.17.0",), ("instructor/__init__.py",), deps=True
)


def install_command(extra: str) -> str:
    """The command that installs extra `extra` into this checkout's venv (README's layout)."""
    return f".venv/bin/pip install -e '.[{extra}]'"


def need(module: str, package: str, extra: str) -> Any:
    """`module`, or a skip saying `package` is missing and how to install it."""
    return pytest.importorskip(
        module, reason=f"{package} is not installed; to run this: {install_command(extra)}"
    )


def own_folder(packages: OwnFolder) -> Path:
    """The folder holding `packages`, installed from the package index the first time a test
    asks (under a lock: two pytest workers may ask at once); a skip saying why and what to run
    when it cannot be."""
    if packages.installed():
        return packages.home
    parent = packages.home.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(
            parent / f".{packages.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        pytest.skip(
            f"{packages.name} cannot be installed in {parent} ({exc}); "
            f"run {packages.manual_command()}"
        )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not packages.installed():
            _install(packages)
    finally:
        os.close(lock)  # releases the lock
    return packages.home


def _install(packages: OwnFolder) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{packages.name}-", dir=packages.home.parent))
    try:
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    *(() if packages.deps else ("--no-deps",)),
                    "--target",
                    str(staging),
                    *packages.requirements,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(
                f"installing {packages.name} took over 10 minutes; run {packages.manual_command()}"
            )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            pytest.skip(
                f"{packages.name} could not be installed ({last}); run {packages.manual_command()}"
            )
        # Whole or not at all: a half-installed folder from an interrupted run goes first.
        shutil.rmtree(packages.home, ignore_errors=True)
        os.replace(staging, packages.home)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


def own_folder_env(packages: OwnFolder, probe: str) -> dict[str, str]:
    """The environment of a child Python with `packages`' folder first on its path, once `probe`
    (an import statement) has run there; a skip saying why when it does not."""
    home = own_folder(packages)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(home), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        pytest.skip(
            f"{packages.name} cannot be imported beside this Python ({probe}): "
            f"{done.stderr.strip()[-300:]}"
        )
    return env
