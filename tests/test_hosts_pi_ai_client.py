"""agy as a pi-ai-client provider, driven by pi-agent-loop, with both real packages on agy-sim: a
turn through `Models`, a two-prompt `Agent` (one agy conversation), and an abort through the
Agent's own `abort()` (which cancels the stream).

pi-ai-client's import name `pi_ai` is also pi-ai-python's, so pi-ai-client and pi-agent-loop
live in their own folder (`.venv/hosts/pi-ai-client`, installed on first use: `optional.py`), and
each check runs in a child Python with that folder first on its path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import slow_start_scenario
from host_helpers import tool_answer
from host_helpers import tool_arguments
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import PI_AI_CLIENT
from optional import own_folder_env

from agy_provider.agy.models import list_models

pytestmark = pytest.mark.slow

PRELUDE = """
import asyncio, json, sys
import psutil
import pi_ai, pi_agent_loop
from pi_ai import Context, UserMessage
from agy_provider.hosts.pi_ai_client import provider
from agy_provider.live.provider import wait_for_turns

def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")

def agy_models():
    models = pi_ai.create_models()
    models.set_provider(provider())
    return models

async def until_agy_runs():
    # agy-sim is our own child: the turn has started agy.
    while not any("agy-sim" in " ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)):
        await asyncio.sleep(0.02)
"""


def run_host(body: str, tmp_path: Path) -> Any:
    """Run `body` (an `async def main()` returning JSON) beside pi-ai-client; its answer."""
    env = own_folder_env(PI_AI_CLIENT, "import pi_ai.registry, pi_agent_loop")
    script = tmp_path / "host.py"
    script.write_text(
        PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(asyncio.run(main())))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=200
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_turn_through_models(live_env: Path, tmp_path: Path) -> None:
    answer = run_host(
        """
        async def main():
            import importlib.metadata as md
            models = agy_models()
            model = models.get_model("agy", "gemini-3.7-flash")
            stream = models.stream_simple(model, Context(system_prompt="Be brief.", messages=[UserMessage(content="hello")]))
            kinds = [event.type async for event in stream]
            message = await stream.result()
            await wait_for_turns()
            return {"ids": [m.id for m in models.get_models("agy")], "kinds": kinds,
                    "stop": message.stop_reason, "text": text_of(message),
                    "versions": [md.version("pi-ai-client"), md.version("pi-agent-loop")]}
        """,
        tmp_path,
    )
    assert answer["versions"] == ["0.1.1", "0.1.0"]
    assert answer["ids"] == ["default", *(m.id for m in list_models(agy_sim_path()))]
    kinds = answer["kinds"]
    assert kinds[0] == "start" and kinds[-1] == "done" and "text_delta" in kinds
    assert answer["stop"] == "stop" and answer["text"] == scenario_answer("default")
    assert leftovers(live_env) == []


@pytest.mark.parametrize("session_options", ['{"session_id": "pi-agent-loop"}', "{}"])
def test_a_two_prompt_agent_is_one_agy_conversation(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_options: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    answer = run_host(
        """
        async def main():
            models = agy_models()
            agent = pi_agent_loop.Agent(model=models.get_model("agy", "gemini-3.7-flash"),
                                        stream_fn=models.stream_simple,
                                        stream_options=SESSION_OPTIONS)
            await agent.prompt("count with me")
            await agent.prompt("next")
            await wait_for_turns()
            return [text_of(m) for m in agent.state.messages if m.role == "assistant"]
        """.replace("SESSION_OPTIONS", session_options),
        tmp_path,
    )
    assert answer == [scenario_answer("two-turn", 0), scenario_answer("two-turn", 1)]
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []


def test_the_agents_own_abort(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    answer = run_host(
        """
        async def main():
            models = agy_models()
            agent = pi_agent_loop.Agent(model=models.get_model("agy", "default"),
                                        stream_fn=models.stream_simple)
            running = asyncio.ensure_future(agent.prompt("hi"))
            await until_agy_runs()
            agent.abort()
            await asyncio.wait_for(running, 60)
            await wait_for_turns()
            last = agent.state.messages[-1]
            return {"role": last.role, "stop": last.stop_reason, "error": last.error_message}
        """,
        tmp_path,
    )
    assert answer["role"] == "assistant" and answer["stop"] == "aborted" and answer["error"]
    assert leftovers(live_env) == []


def test_the_agents_tool_runs_once_through_agy_and_the_answer_uses_it(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agy calls pi-agent-loop's tool through the MCP bridge (`host_helpers.TOOL_SCENARIO`)."""
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    answer = run_host(
        """
        from pydantic import BaseModel
        from pi_ai import TextContent
        from pi_agent_loop.tools import AgentTool, AgentToolResult

        runs = []

        class LookupParams(BaseModel):
            order_id: str
            verbose: bool = False

        class Lookup(AgentTool):
            name = "lookup_order"
            label = "Look up an order"
            description = "Look up an order's status by its id."
            params = LookupParams

            async def execute(self, tool_call_id, params, signal=None, on_update=None):
                runs.append(params.model_dump())
                text = f"order {params.order_id} shipped on 2026-11-28"
                return AgentToolResult(content=[TextContent(text=text)])

        async def main():
            models = agy_models()
            agent = pi_agent_loop.Agent(model=models.get_model("agy", "default"),
                                        stream_fn=models.stream_simple, tools=[Lookup()],
                                        stream_options={"session_id": "pi-agent-loop-tool"})
            await agent.prompt("Where is my order A-1042?")
            await wait_for_turns()
            return {"runs": runs, "roles": [m.role for m in agent.state.messages],
                    "text": text_of(agent.state.messages[-1])}
        """,
        tmp_path,
    )
    assert answer["runs"] == [tool_arguments()]
    assert answer["roles"] == ["user", "assistant", "toolResult", "assistant"]
    assert answer["text"] == tool_answer()
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []
