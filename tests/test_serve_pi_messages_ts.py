"""pi 1.6's own wire API against `agy-provider serve`, through the real TypeScript clients from npm
(`tests/npm_clients.py`, skipped saying why where they cannot be installed): `@earendil-works/pi-ai`
1.6.0's `pi-messages` client (`tests/pi_messages_driver.mjs`), the README's example run as
written, and the pi coding agent 1.6.0 headless (`pi -p`, `-c`) with a `models.json` provider of
`"api": "pi-messages"`; agy-sim as agy.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_helpers import SHELL_ANSWER
from client_helpers import SHELL_SAID
from client_helpers import TOKEN
from client_helpers import client_env
from client_helpers import folders_fixture  # noqa: F401 (the `folders` fixture)
from client_helpers import run
from client_helpers import serve_fixture  # noqa: F401 (the `serve` fixture)
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import scenario_answer
from npm_clients import install
from npm_clients import node_for
from pi_ts_helpers import LOOKUP
from pi_ts_helpers import TOOL_PROMPT
from pi_ts_helpers import calls
from pi_ts_helpers import text
from pi_ts_helpers import tool_result
from pi_ts_helpers import user
from serve_helpers import CITY
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("pi_messages_driver.mjs")
README = Path(__file__).resolve().parent.parent / "README.md"
NODE_22 = (22, 19)  # what pi 1.6's packages ask for (`engines`)


@pytest.fixture(scope="module")
def node() -> str:
    return node_for(NODE_22, "pi 1.6")


@pytest.fixture(scope="module")
def pi_ai_folder() -> Path:
    folder = install("pi-ai-1.6")
    # ESM resolves packages from the script's own folder: the driver runs from the install.
    script = folder / DRIVER.name
    if not script.is_file() or script.read_bytes() != DRIVER.read_bytes():
        partial = folder / f".{DRIVER.name}.{os.getpid()}"
        partial.write_bytes(DRIVER.read_bytes())
        partial.replace(script)
    return folder


@pytest.fixture(scope="module")
def pi_driver(node: str, pi_ai_folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """One node process for the module; each test names its server."""
    proc = subprocess.Popen(
        [node, str(pi_ai_folder / DRIVER.name)],
        cwd=pi_ai_folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)


class PiMessages:
    """pi-ai 1.6's `streamSimple` over `pi-messages`, one request a line to the driver."""

    def __init__(self, proc: subprocess.Popen[bytes], served: Served) -> None:
        self.proc, self.served = proc, served

    def model(self) -> dict[str, Any]:
        return {
            "id": "default",
            "name": "agy via agy-provider serve",
            "api": "pi-messages",
            "provider": "agy",
            "baseUrl": f"{self.served.base}/pi",
            "reasoning": True,
            "input": ["text", "image"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 1_000_000,
            "maxTokens": 8192,
        }

    async def turn(self, context: dict[str, Any], **options: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        token = options.pop("token", self.served.token)
        request = {
            "model": self.model(),
            "context": context,
            "options": {"apiKey": token, **options},
        }
        await asyncio.to_thread(self._send, json.dumps(request).encode() + b"\n")
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 240)
        assert line, "pi-ai's driver ended without answering"
        answer: dict[str, Any] = json.loads(line)
        assert "thrown" not in answer, answer["thrown"]
        return answer

    def _send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    async def complete(self, context: dict[str, Any], **options: Any) -> dict[str, Any]:
        message: dict[str, Any] = (await self.turn(context, **options))["message"]
        return message


@pytest.fixture
def pi(
    pi_driver: subprocess.Popen[bytes], served: Served, monkeypatch: pytest.MonkeyPatch
) -> PiMessages:
    monkeypatch.setenv("AGY_SIM_SPEED", "20")
    return PiMessages(pi_driver, served)


# --- pi-ai 1.6's pi-messages client --------------------------------------------------------------


async def test_text_and_thinking_then_a_second_turn_in_the_same_conversation(
    pi: PiMessages, served: Served
) -> None:
    context: dict[str, Any] = {"systemPrompt": "Be concise.", "messages": [user("Hi!")]}
    answer = await pi.turn(context, reasoning="high")
    first = answer["message"]
    assert (first["stopReason"], text(first)) == ("stop", scenario_answer("default")), first
    kinds = [e["type"] for e in answer["events"]]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert kinds.index("thinking_start") < kinds.index("thinking_end") < kinds.index("text_start")
    (thinking,) = [b for b in first["content"] if b["type"] == "thinking"]
    assert thinking["thinking"] and thinking["thinkingSignature"], thinking
    assert first["responseId"].startswith("agy-provider:1:"), first  # the continuity mark
    assert first["api"] == "pi-messages" and first["responseModel"], first
    usage = first["usage"]
    assert usage["output"] > 0
    parts = usage["input"] + usage["output"] + usage["cacheRead"] + usage["cacheWrite"]
    assert usage["totalTokens"] == parts

    context["messages"] += [first, user("Thanks")]
    second = await pi.complete(context, reasoning="max")  # pi 1.6's new level
    assert (second["stopReason"], text(second)) == ("stop", scenario_answer("default")), second
    assert len(conversations(served.app)) == 1
    assert second["responseId"].split(":")[2] == first["responseId"].split(":")[2]


async def test_a_tool_round_trip_resumes_the_parked_agy_turn(
    pi: PiMessages, served: Served
) -> None:
    context: dict[str, Any] = {
        "systemPrompt": "You are helpful.",
        "messages": [user(TOOL_PROMPT)],
        "tools": [LOOKUP],
    }
    answer = await pi.turn(context, sessionId="pi-ts-tools")
    first = answer["message"]
    assert first["stopReason"] == "toolUse", first
    (call,) = calls(first)
    assert (call["name"], call["arguments"]) == ("lookup_order", tool_arguments())
    (ended,) = [e for e in answer["events"] if e["type"] == "toolcall_end"]
    assert ended["toolCall"]["id"] == call["id"]
    output = tool_output(call["arguments"]["order_id"])
    context["messages"] += [
        first,
        tool_result(call["id"], call["name"], [{"type": "text", "text": output}]),
    ]
    second = await pi.complete(context, sessionId="pi-ts-tools")
    assert (second["stopReason"], text(second)) == ("stop", tool_answer()), second
    assert len(conversations(served.app)) == 1


async def test_a_forced_tool_choice_is_that_tools_call(
    pi: PiMessages, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    record = {"name": "record_city", "description": "Record a city.", "parameters": CITY}
    choice = {"type": "function", "function": {"name": "record_city"}}
    message = await pi.complete(
        {"messages": [user("Paris?")], "tools": [record]}, toolChoice=choice
    )
    assert message["stopReason"] == "toolUse", message
    (call,) = calls(message)
    expected = json.loads(scenario_answer("structured-output"))
    assert (call["name"], call["arguments"]) == ("record_city", expected)


async def test_an_abort_mid_stream_then_the_next_turn_answers(pi: PiMessages) -> None:
    context: dict[str, Any] = {"messages": [user("List 50 first names. [agy-sim:hang]")]}
    aborted = await pi.complete(context, abortAfterChars=1)
    assert aborted["stopReason"] == "aborted", aborted
    context["messages"] += [aborted, user("Only five, please. [agy-sim:default]")]
    follow = await pi.complete(context)
    assert (follow["stopReason"], text(follow)) == ("stop", scenario_answer("default")), follow


async def test_errors_reach_pi_as_its_own_error_messages(
    pi: PiMessages, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = await pi.complete({"messages": [user("Hi")]}, token="not-the-token")
    assert wrong["stopReason"] == "error" and wrong["errorMessage"].startswith("401 "), wrong
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 170_000
    overflow = await pi.turn({"messages": [user(filler)]})
    assert overflow["message"]["stopReason"] == "error", overflow["message"]
    assert overflow["overflow"], overflow["message"]["errorMessage"]  # pi's isContextOverflow
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    failed = await pi.complete({"messages": [user("Hi")]})
    assert failed["stopReason"] == "error" and "quota" in failed["errorMessage"].lower(), failed


async def test_the_readmes_example_runs_as_written(
    node: str, pi_ai_folder: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SPEED", "20")
    readme = README.read_text(encoding="utf-8")
    (example,) = re.findall(r"```js\n(.*?)```", readme, re.DOTALL)
    assert "@earendil-works/pi-ai" in example
    script = pi_ai_folder / f".readme-example.{os.getpid()}.mjs"
    script.write_text(example.replace("http://127.0.0.1:8642", served.base), encoding="utf-8")
    env = {**os.environ, "AGY_PROVIDER_SERVE_TOKEN": served.token}
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [node, str(script)],
            cwd=pi_ai_folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[thinking] "), done.stdout
    assert scenario_answer("default") in lines and re.fullmatch(r"stop, \d+ tokens", lines[-1])


# --- the pi coding agent 1.6 ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pi_cli() -> Path:
    return install("pi-coding-agent-1.6") / "node_modules" / ".bin" / "pi"


def pi_p(node: str, pi_cli: Path, base: str, folders: tuple[Path, Path], *args: str) -> str:
    """`pi -p …` with the README's models.json (`"api": "pi-messages"`); what it printed."""
    home, work = folders
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    readme = README.read_text(encoding="utf-8")
    config = next(
        block
        for block in re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
        if '"pi-messages"' in block
    )
    (agent / "models.json").write_text(config.replace("http://127.0.0.1:8642", base))
    env = client_env(
        home,
        PI_CODING_AGENT_DIR=str(agent),
        PI_OFFLINE="1",
        PI_TELEMETRY="0",
        AGY_PROVIDER_SERVE_TOKEN=TOKEN,
        # pi's launcher runs `node` from PATH: the one new enough first.
        PATH=f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    done = run([str(pi_cli), "--provider", "agy", "--model", "default", *args], env, work)
    assert done.returncode == 0, f"pi exited {done.returncode}: {done.stderr}{done.stdout}"
    return done.stdout.strip()


def test_pi_answers_then_continues_one_agy_conversation(
    node: str, pi_cli: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    answer = scenario_answer("default")
    assert pi_p(node, pi_cli, serve, folders, "-p", "Hi!") == answer
    assert pi_p(node, pi_cli, serve, folders, "-c", "-p", "Thanks") == answer
    assert len(conversations(live_env)) == 1


def test_pi_runs_its_bash_tool_for_agy(
    node: str, pi_cli: Path, serve: str, live_env: Path, folders: tuple[Path, Path]
) -> None:
    prompt = "Run the check. [agy-sim:client-bash-pi]"
    assert pi_p(node, pi_cli, serve, folders, "-p", prompt) == SHELL_ANSWER + SHELL_SAID
    assert len(conversations(live_env)) == 1
