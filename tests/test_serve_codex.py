"""OpenAI's Codex CLI (`@openai/codex` from npm, the latest) headless against `agy-provider serve`:
`codex exec` with a custom provider (`wire_api = "responses"`) — a plain answer, Codex's shell tool
called by agy through the bridge, and `codex exec resume` continuing one agy conversation.

An optional tier: npm installs Codex into a cache folder outside the repository (`npm_clients`, its version pinned there); the
tests skip, saying why and how to enable them, where node, npm, the registry or Codex's binary is
not available. Codex ≥ 0.118 speaks only the Responses API (`POST /v1/responses`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from host_helpers import conversations
from live_helpers import scenario_answer
from npm_clients import install
from npm_clients import install_command
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

pytestmark = pytest.mark.slow

# agy-sim's scenario in which the model calls Codex's shell tool (`exec_command`) by name.
SHELL_SCENARIO = "codex-shell"
# What that scenario's command prints (`printf 'codex-%s\n' shell-ok`): not in the command itself,
# so seeing it in agy's answer shows the command ran and its output came back.
SHELL_OUTPUT = "codex-shell-ok"

# A user's `$CODEX_HOME/config.toml` for serve. `approval_policy = "never"` and full access let
# `codex exec` run the shell tool with no one to ask (Codex's own sandbox needs namespaces a
# container may not give); no update check, analytics or feedback upload; Codex retries a failed
# request or stream itself, which would only hide a failure here.
CONFIG = """\
model = "default"
model_provider = "agy"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.agy]
name = "agy-provider serve"
base_url = "{base}/v1"
env_key = "AGY_PROVIDER_SERVE_TOKEN"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.fixture(scope="module")
def codex() -> Path:
    """Codex's launcher from the npm cache, once it has shown it runs here."""
    binary = install("codex") / "node_modules" / ".bin" / "codex"
    try:
        probe = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"codex --version did not run: {exc}; to enable: {install_command('codex')}")
    if probe.returncode != 0 or not probe.stdout.startswith("codex-cli "):
        pytest.skip(
            f"codex --version failed (no binary for this platform?): "
            f"{(probe.stderr or probe.stdout).strip()[-300:]}; to enable: {install_command('codex')}"
        )
    return binary


class CodexRun:
    """`codex exec` in one test's folders: its own CODEX_HOME, HOME and working folder."""

    def __init__(self, binary: Path, served: Served, folder: Path) -> None:
        self.binary = binary
        self.served = served
        self.home = folder / "codex-home"
        self.work = folder / "work"
        for path in (self.home, self.work):
            path.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(CONFIG.format(base=served.base))

    async def __call__(self, *args: str) -> list[dict[str, Any]]:
        """Run `codex exec --json … ARGS`; the JSONL events it printed (it must exit 0)."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home.parent),
            "CODEX_HOME": str(self.home),
            "AGY_PROVIDER_SERVE_TOKEN": self.served.token,
            "NO_COLOR": "1",
        }
        proc = await asyncio.create_subprocess_exec(
            str(self.binary),
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--strict-config",
            *args,
            cwd=self.work,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 200)
        events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        assert proc.returncode == 0, (err.decode()[-2000:], events)
        return events


@pytest.fixture
def codex_exec(codex: Path, served: Served, tmp_path: Path) -> CodexRun:
    return CodexRun(codex, served, tmp_path)


def items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The completed items of one type (`agent_message`, `reasoning`, `command_execution`)."""
    return [
        e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == kind
    ]


def answer(events: list[dict[str, Any]]) -> str:
    return "".join(item["text"] for item in items(events, "agent_message"))


def completed(events: list[dict[str, Any]]) -> dict[str, Any]:
    (turn,) = [e for e in events if e["type"] in ("turn.completed", "turn.failed")]
    assert turn["type"] == "turn.completed", turn
    return turn


async def test_codex_exec_plain_answer(
    codex_exec: CodexRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    events = await codex_exec("Hi")
    turn = completed(events)
    assert answer(events) == scenario_answer("default"), events
    assert any(item["text"] for item in items(events, "reasoning"))  # agy's thinking, summarised
    assert turn["usage"]["output_tokens"] > 0 and turn["usage"]["input_tokens"] > 0


async def test_codex_shell_tool_called_by_agy(
    codex_exec: CodexRun, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", SHELL_SCENARIO)
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    events = await codex_exec("Run the marker command in your shell.")
    completed(events)
    (run,) = items(events, "command_execution")
    assert (run["exit_code"], run["aggregated_output"]) == (0, SHELL_OUTPUT + "\n"), run
    prefix = scenario_answer(SHELL_SCENARIO).split("{mcp_result}")[0]
    text = answer(events)
    assert text.startswith(prefix) and SHELL_OUTPUT in text, events
    assert len(conversations(served.app)) == 1  # the parked agy turn was resumed, not restarted


async def test_codex_exec_resume_continues_one_agy_conversation(
    codex_exec: CodexRun, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    first = await codex_exec("Say one.")
    completed(first)
    assert answer(first) == scenario_answer("two-turn", 0)
    (thread,) = [e["thread_id"] for e in first if e["type"] == "thread.started"]
    # A second Codex process resends the whole transcript (store = false): agy's second turn
    # of the same conversation answers, and no second conversation is started.
    second = await codex_exec("resume", thread, "Now say two.")
    completed(second)
    assert answer(second) == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 1
