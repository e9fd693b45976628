"""Lint and types as part of the test run: ruff over the tree and mypy (strict) over the package,
its plugins and these tests, as pyproject.toml configures them, so `pytest` alone is the check."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from optional import install_command

ROOT = Path(__file__).resolve().parents[1]


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed; to run this: {install_command('dev')}")
    # A cold mypy over the whole tree takes a minute or two on a busy 2-core machine.
    return subprocess.run(
        [sys.executable, "-m", name, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_ruff_finds_nothing() -> None:
    done = run_tool("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(900)  # beyond the suite's hang bound: a cold run checks every module
def test_mypy_finds_nothing() -> None:
    done = run_tool("mypy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ci_runs_exactly_the_readme_commands() -> None:
    """`.ci/run` is the README's two commands and nothing else: CI is green only when a
    newcomer's set-up is."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None, "the README's first sh block is gone"
    shown = block.group(1).splitlines()
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [
        line for line in lines if line and not line.startswith(("#", "set ", 'cd "$(dirname'))
    ]
    assert commands == shown
    assert "set -euo pipefail" in lines
