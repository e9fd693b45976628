"""The team-router tier's LiteLLM proxy: its pinned version installed once into a virtualenv of its
own outside the repository (`~/.cache/agy-provider/litellm/<version>`), or the test skipped.

LiteLLM brings its own pins (FastAPI, Starlette, uvicorn, openai, …) that must not meet this venv's,
so it gets a venv, installed under a file lock (pytest-xdist workers install it once between them)
and marked whole only at the end. `LiteLLMProxy` runs `litellm --config` on loopback as a real
process and waits for its liveness route.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

__all__ = ["LITELLM", "LiteLLMProxy", "free_port", "install_command", "litellm_bin"]

# The newest release whose `proxy` extra this package index can install: from 1.108 the proxy
# is a package of its own (`litellm-proxy`), not on the index this tier was built against.
# 1.100 has the router's `session_affinity` check and reads `x-<vendor>-session-id` headers.
LITELLM = "litellm[proxy]==1.100.5"
INSTALL_TIMEOUT = 1800.0  # a cold install is ~8 minutes on two busy cores
START_TIMEOUT = 180.0  # the proxy imports a few hundred modules before it listens
_REFUSED: list[str] = []


def _home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agy-provider" / "litellm" / LITELLM.rsplit("==", 1)[1]


def install_command() -> str:
    """What installs the proxy where the tier looks for it (a skip's hint)."""
    home = _home()
    return f"{sys.executable} -m venv {home} && {home}/bin/pip install '{LITELLM}'"


def litellm_bin() -> Path:
    """The `litellm` command of the tier's venv, installed the first time; skips saying why not."""
    home = _home()
    binary = home / "bin" / "litellm"
    whole = home / ".whole"
    if whole.is_file():
        return binary
    if _REFUSED:
        pytest.skip(_REFUSED[0])
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it right now
        if whole.is_file():
            return binary
        shutil.rmtree(home, ignore_errors=True)  # a half-installed venv from an interrupted run
        try:
            subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300)
            done = subprocess.run(
                [str(home / "bin" / "pip"), "install", "--quiet", LITELLM],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            _REFUSED.append(f"installing LiteLLM failed ({exc}); run: {install_command()}")
            pytest.skip(_REFUSED[0])
        if done.returncode != 0 or not binary.is_file():
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if "WARNING" not in ln]
            said = " | ".join(lines[-3:]) or "(no output)"
            _REFUSED.append(f"installing LiteLLM failed (exit {done.returncode}): {said}; "
                            f"run: {install_command()}")  # fmt: skip
            pytest.skip(_REFUSED[0])
        whole.touch()
    return binary


def free_port() -> int:
    """A port free on 127.0.0.1 now (the proxy's config names it before the proxy binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiteLLMProxy:
    """`litellm --config CONFIG` on 127.0.0.1 as a real process, its log in `log` (a file, so a
    chatty proxy never blocks on a full pipe); `base` is its URL once its liveness route answers."""

    def __init__(
        self, binary: Path, config: Path, log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(config.parent),
            # No fetch of the cost map from the internet; no telemetry.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        argv = [str(binary), "--config", str(config), "--host", "127.0.0.1",
                "--port", str(self.port), "--num_workers", "1"]  # fmt: skip
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_live()

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def _wait_live(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"LiteLLM exited {self.proc.returncode}:\n{self.said()[-3000:]}"
                )
            try:
                if httpx.get(f"{self.base}/health/liveliness", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)  # polling a process that gives no other sign it is ready
        self.stop()
        raise AssertionError(
            f"LiteLLM did not answer in {START_TIMEOUT:.0f} s:\n{self.said()[-3000:]}"
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
