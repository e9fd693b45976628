"""The coding agents people run, headless against a real `agy-provider serve` process on agy-sim:
Claude Code (`claude -p`), the pi coding agent (`pi -p`) and Qwen Code (`qwen`), installed from
npm into a cache (`tests/npm_clients.py`; skipped, saying why, where they cannot be).

Each test has its own agy state folder, HOME and working folder: a plain answer, a second turn
that continues the conversation (`--continue` / `-c` / `--resume`, Qwen Code's second turn in one
stream-json session with its memory extractor on: still one agy conversation for the main line),
and client tool round trips (agy-sim's `client-bash` scenarios call the client's own shell tool,
the client runs it, agy's answer quotes the output only a real shell prints;
`client-read-image` has Claude Code `Read` a PNG and agy receive the image).
"""

from __future__ import annotations

import json
import struct
import subprocess
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
from client_helpers import RUN_TIMEOUT
from client_helpers import SHELL_ANSWER
from client_helpers import SHELL_SAID
from client_helpers import TOKEN
from client_helpers import client_env
from client_helpers import folders_fixture  # noqa: F401 (the `folders` fixture)
from client_helpers import run
from client_helpers import serve_fixture  # noqa: F401 (the `serve` fixture)
from host_helpers import conversations
from live_helpers import recorded_user_inputs
from live_helpers import scenario_answer
from npm_clients import PACKAGES
from npm_clients import install

pytestmark = pytest.mark.slow


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


def png_pixels(width: int = 8, height: int = 8) -> bytes:
    """A small valid PNG (red, RGB, 8 bits): what Claude Code's `Read` hands back as an image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_claude_code_reads_an_image_for_agy(
    claude: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    """agy calls Claude Code's `Read` on a PNG in its working folder (agy-sim's
    `client-read-image`); Claude Code returns the image in the tool result, serve hands it to
    agy, and the answer names what agy-sim's MCP client received: an image, its type, its size."""
    png = png_pixels()
    (folders[1] / "agy-sim-pixel.png").write_bytes(png)
    config = {"ANTHROPIC_MODEL": "default"}
    prompt = "Look at the picture. [agy-sim:client-read-image]"
    done = claude_p(claude, serve, config, folders, prompt, "--allowedTools", "Read")
    said = done["result"]
    assert said.startswith("The client's Read returned: "), said
    assert f"[image image/png, {len(png)} bytes]" in said, said
    assert done["num_turns"] == 2
    assert len(conversations(live_env)) == 1


def test_claude_code_resume_continues_the_agy_conversation(
    claude: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    config = {"ANTHROPIC_MODEL": "default"}
    first = claude_p(claude, serve, config, folders, "Hi")
    session = first["session_id"]
    second = claude_p(claude, serve, config, folders, "Thanks", "--resume", session)
    assert second["result"] == scenario_answer("default")
    assert second["session_id"] == session
    [conversation] = conversations(live_env)
    assert (
        len(recorded_user_inputs(live_env, conversation)) == 2
    )  # both turns in that one conversation


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


# --- Qwen Code ------------------------------------------------------------------------------

QWEN_SETTINGS = {
    # Its background memory extraction on (the default, said outright: the test is about it),
    # and nothing reaching past serve.
    "memory": {"enableManagedAutoMemory": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False},
}


@pytest.fixture(scope="module")
def qwen() -> Path:
    return install("qwen-code") / "node_modules" / ".bin" / "qwen"


def qwen_env(home: Path, base: str) -> dict[str, str]:
    """Qwen Code configured as its README says (`OPENAI_BASE_URL`, `OPENAI_API_KEY`,
    `OPENAI_MODEL`) plus `QWEN_SETTINGS` in its settings file."""
    (home / ".qwen").mkdir(exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(QWEN_SETTINGS))
    return client_env(
        home, OPENAI_BASE_URL=f"{base}/v1", OPENAI_API_KEY=TOKEN, OPENAI_MODEL="default"
    )


QWEN_ARGS = ["--auth-type", "openai", "--output-format", "stream-json"]


def qwen_session(
    qwen: Path, base: str, folders: tuple[Path, Path], prompts: list[str]
) -> list[dict[str, Any]]:
    """One headless Qwen Code session (`--input-format stream-json`): each prompt sent once the
    answer to the one before it is out, as a user types; each turn's result."""
    home, work = folders
    argv = [str(qwen), "--input-format", "stream-json", *QWEN_ARGS]
    proc = subprocess.Popen(
        argv,
        env=qwen_env(home, base),
        cwd=work,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)  # a hung client fails, never blocks
    watchdog.start()
    results: list[dict[str, Any]] = []
    seen: list[str] = []
    try:
        for prompt in prompts:
            turn = {"type": "user", "message": {"role": "user", "content": prompt}}
            proc.stdin.write(json.dumps(turn) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                seen.append(line)
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("type") == "result":
                    results.append(event)
                    break
        proc.stdin.close()
        err = proc.stderr.read() if proc.stderr else ""
        code = proc.wait(timeout=RUN_TIMEOUT)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, f"qwen exited {code}: {err}{''.join(seen)[-2000:]}"
    assert len(results) == len(prompts), "".join(seen)[-2000:]
    assert not any(r.get("is_error") for r in results), results
    return results


def test_qwen_code_answers(
    qwen: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    home, work = folders
    done = run([str(qwen), "Hi", *QWEN_ARGS], qwen_env(home, serve), work)
    assert done.returncode == 0, f"qwen exited {done.returncode}: {done.stderr}{done.stdout}"
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    [result] = [e for e in events if e.get("type") == "result"]
    assert not result["is_error"] and result["result"] == scenario_answer("default")


def test_qwen_code_memory_requests_leave_its_main_line_one_agy_conversation(
    qwen: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    """Two user turns in one headless session: after each, Qwen Code's memory extractor sends
    the transcript under its own system prompt and tools, plus one more user message — a side
    request. The main line continues its own agy conversation; each side request gets one of
    its own carrying the history (the ownership rule: a branch never takes the main line)."""
    results = qwen_session(qwen, serve, folders, ["Hi", "Thanks"])
    assert [r["result"] for r in results] == [scenario_answer("default")] * 2
    assert len({r["session_id"] for r in results}) == 1
    recorded = {c: recorded_user_inputs(live_env, c) for c in conversations(live_env)}
    mains = [c for c, said in recorded.items() if len(said) == 2]
    assert len(mains) == 1, recorded  # one agy conversation took both user turns
    first, second = recorded[mains[0]]
    assert first.endswith("Hi") and second == "Thanks", (first[-80:], second)
    sides = [said for c, said in recorded.items() if c not in mains]
    assert sides, recorded  # the memory extractor ran, and branched off
    for said in sides:  # each its own conversation: the history, then its one user message
        assert len(said) == 1 and "Managed memory" in said[0], said
