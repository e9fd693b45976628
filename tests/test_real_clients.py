"""The coding agents people run, headless against a real `agy-provider serve` process on agy-sim:
Claude Code (`claude -p`) and the pi coding agent (`pi -p`), installed from npm into a cache
(`tests/npm_clients.py`; skipped, saying why, where they cannot be).

Each test has its own agy state folder, HOME and working folder: a plain answer, a second turn
that continues the conversation (`--continue` / `-c`: still one agy conversation), and a client
tool round trip (agy-sim's `client-bash` scenarios call the client's own shell tool, the client
runs it, agy's answer quotes the output only a real shell prints).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from host_helpers import conversations
from live_helpers import scenario_answer
from npm_clients import PACKAGES
from npm_clients import install
from test_serve_security import ServeProcess

pytestmark = pytest.mark.slow

TOKEN = "real-client-tier-" + "t" * 24
SHELL_SAID = "agy-sim-42"  # what `echo agy-sim-$((6 * 7))` prints, in a real shell only
SHELL_ANSWER = "The client's shell printed: "
RUN_TIMEOUT = 240

# What a user's own machine has, and nothing of this one's keys or settings.
PASSED_ON = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")


@pytest.fixture
def serve(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`agy-provider serve` as a process on 127.0.0.1 with a token; its base URL (no /v1)."""
    monkeypatch.setenv("AGY_SIM_SPEED", "20")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AGY_PROVIDER_SERVE_TOKEN": TOKEN}
    server = ServeProcess(env)
    try:
        yield server.base
    finally:
        server.proc.terminate()
        server.proc.communicate(timeout=120)


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


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


# --- Claude Code ----------------------------------------------------------------------------

CLAUDE_QUIET = {
    # Claude Code's own switches for a machine that should reach nothing but its API.
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
# As a user configures it (`default`, an agy model, or a Claude name, nothing else), and the
# workaround issue 28 found before serve took Claude Code's requests (the body's model and
# metadata replaced), which must keep working.
CLAUDE_CONFIGS = [
    pytest.param({"ANTHROPIC_MODEL": "default"}, id="default"),
    pytest.param({"ANTHROPIC_MODEL": "gemini-3.7-flash-medium"}, id="agy-model"),
    pytest.param({"ANTHROPIC_MODEL": "claude-sonnet-4-5"}, id="claude-name"),
    pytest.param(
        {
            "ANTHROPIC_MODEL": "claude-sonnet-4-5",
            "CLAUDE_CODE_EXTRA_BODY": json.dumps({"model": "default", "metadata": {}}),
        },
        id="extra-body",
    ),
]


@pytest.fixture(scope="module")
def claude() -> Path:
    folder = install("claude-code")
    binary = folder / "node_modules" / ".bin" / "claude"
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"Claude Code ({PACKAGES['claude-code'].spec}) does not start here: {exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-300:]
        pytest.skip(f"Claude Code ({PACKAGES['claude-code'].spec}) does not start here: {said}")
    return binary


def claude_p(
    claude: Path, base: str, config: dict[str, str], folders: tuple[Path, Path], *args: str
) -> dict[str, Any]:
    """`claude -p … --output-format json` against serve; its result object."""
    home, work = folders
    env = client_env(
        home, ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY=TOKEN, **CLAUDE_QUIET, **config
    )
    done = run([str(claude), "-p", *args, "--output-format", "json"], env, work)
    assert done.stdout.strip(), (
        f"Claude Code printed nothing (exit {done.returncode}): {done.stderr}"
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not result.get("is_error"), result.get("result")
    assert done.returncode == 0, done.stderr
    return result


@pytest.mark.parametrize("config", CLAUDE_CONFIGS)
def test_claude_code_answers_then_continues_one_agy_conversation(
    claude: Path, serve: str, live_env: Path, folders: tuple[Path, Path], config: dict[str, str]
) -> None:
    first = claude_p(claude, serve, config, folders, "Hi")
    assert first["result"] == scenario_answer("default")
    second = claude_p(claude, serve, config, folders, "Thanks", "--continue")
    assert second["result"] == scenario_answer("default")
    assert second["session_id"] == first["session_id"]  # Claude Code's own session went on
    assert len(conversations(live_env)) == 1  # and so did agy's conversation


@pytest.mark.parametrize("config", CLAUDE_CONFIGS)
def test_claude_code_runs_its_bash_tool_for_agy(
    claude: Path, serve: str, live_env: Path, folders: tuple[Path, Path], config: dict[str, str]
) -> None:
    prompt = "Run the check. [agy-sim:client-bash]"
    done = claude_p(claude, serve, config, folders, prompt, "--allowedTools", "Bash(echo:*)")
    assert done["result"].startswith(SHELL_ANSWER + SHELL_SAID), done["result"]
    assert done["num_turns"] == 2  # the tool_use answer, then the answer after the result
    assert len(conversations(live_env)) == 1  # agy's turn parked, then resumed


# --- the pi coding agent --------------------------------------------------------------------

PI_APIS = {"anthropic-messages": "agy-anthropic", "openai-completions": "agy-openai"}


@pytest.fixture(scope="module")
def pi_cli() -> Path:
    return install("pi-coding-agent") / "node_modules" / ".bin" / "pi"


def pi_p(pi_cli: Path, base: str, api: str, folders: tuple[Path, Path], *args: str) -> str:
    """`pi -p …` with a models.json naming serve under both wire APIs; what it printed."""
    home, work = folders
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    model = {
        "id": "default",
        "name": "agy (serve)",
        "reasoning": True,
        "input": ["text", "image"],
        "contextWindow": 1_000_000,
        "maxTokens": 8192,
    }
    providers: dict[str, dict[str, Any]] = {
        PI_APIS["anthropic-messages"]: {"baseUrl": base, "api": "anthropic-messages"},
        PI_APIS["openai-completions"]: {"baseUrl": f"{base}/v1", "api": "openai-completions"},
    }
    for provider in providers.values():
        provider.update({"apiKey": TOKEN, "models": [model]})
    (agent / "models.json").write_text(json.dumps({"providers": providers}))
    env = client_env(home, PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1", PI_TELEMETRY="0")
    argv = [str(pi_cli), "--provider", PI_APIS[api], "--model", "default", *args]
    done = run(argv, env, work)
    assert done.returncode == 0, f"pi exited {done.returncode}: {done.stderr}{done.stdout}"
    return done.stdout.strip()


@pytest.mark.parametrize("api", ["anthropic-messages", "openai-completions"])
def test_pi_answers_then_continues_one_agy_conversation(
    pi_cli: Path, serve: str, live_env: Path, folders: tuple[Path, Path], api: str
) -> None:
    assert pi_p(pi_cli, serve, api, folders, "-p", "Hi") == scenario_answer("default")
    assert pi_p(pi_cli, serve, api, folders, "-c", "-p", "Thanks") == scenario_answer("default")
    assert len(conversations(live_env)) == 1


@pytest.mark.parametrize("api", list(PI_APIS))
def test_pi_runs_its_bash_tool_for_agy(
    pi_cli: Path, serve: str, live_env: Path, folders: tuple[Path, Path], api: str
) -> None:
    said = pi_p(pi_cli, serve, api, folders, "-p", "Run the check. [agy-sim:client-bash-pi]")
    assert said == SHELL_ANSWER + SHELL_SAID
    assert len(conversations(live_env)) == 1
