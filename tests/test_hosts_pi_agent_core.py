"""agy for pi-agent-core, with the real `pi_agent_core` (extra `hosts`) on agy-sim: a turn through
its stream function, a two-prompt `Agent` (one agy conversation), and an abort through the
Agent's own `abort()` (its asyncio.Event cancel signal)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import slow_start_scenario
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from host_helpers import until_agy_runs
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import need

from agy_provider.agy.models import list_models
from agy_provider.live.provider import wait_for_turns

core = need("pi_agent_core", "pi-agent-core", "hosts")
from agy_provider.hosts.pi_agent_core import model  # noqa: E402
from agy_provider.hosts.pi_agent_core import models  # noqa: E402
from agy_provider.hosts.pi_agent_core import stream_fn  # noqa: E402

pytestmark = pytest.mark.slow


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_models_are_agys(live_env: Path) -> None:
    assert [m.id for m in models()] == ["default", *(m.id for m in list_models(agy_sim_path()))]
    assert all(m.provider == "agy" and m.api == "agy" for m in models())


async def test_a_turn_through_the_stream_function(live_env: Path) -> None:
    context = core.AgentContext(
        system_prompt="Be brief.",
        messages=[core.UserMessage(content=[core.TextContent(text="hello")])],
    )
    response = stream_fn()(model("gemini-3.7-flash"), context, core.SimpleStreamOptions())
    events = [event async for event in response["events"]]
    message = await response["result"]()
    await wait_for_turns()
    assert isinstance(events[0], core.StreamStartEvent) and isinstance(
        events[-1], core.StreamDoneEvent
    )
    assert isinstance(message, core.AssistantMessage)
    assert message.stop_reason == "stop" and text_of(message) == scenario_answer("default")
    assert leftovers(live_env) == []


@pytest.mark.parametrize("session_id", ["pi-agent-core", None])
async def test_a_two_prompt_agent_is_one_agy_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, session_id: str | None
) -> None:
    # Without a session id the conversation continues by the mark on agy's messages, which
    # pi-agent-core carries back in the text and thinking signatures (it has no responseId).
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    agent = core.Agent(core.AgentOptions(stream_fn=stream_fn(), session_id=session_id))
    agent.set_model(model("gemini-3.7-flash"))
    seen: list[str] = []
    agent.subscribe(lambda event: seen.append(event.type))
    await agent.prompt("count with me")
    await agent.prompt("next")
    await wait_for_turns()
    answers = [text_of(m) for m in agent.state.messages if m.role == "assistant"]
    assert answers == [scenario_answer("two-turn", 0), scenario_answer("two-turn", 1)]
    assert "message_update" in seen and agent.state.error is None
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []


async def test_the_agents_own_abort(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    agent = core.Agent(core.AgentOptions(stream_fn=stream_fn()))
    agent.set_model(model())
    running = asyncio.ensure_future(agent.prompt("hi"))
    await until_agy_runs(live_env)
    agent.abort()
    await asyncio.wait_for(running, 60)
    await wait_for_turns()
    last = agent.state.messages[-1]
    assert last.role == "assistant" and last.stop_reason == "aborted" and last.error_message
    assert leftovers(live_env, recorder) == []


async def test_the_agents_tool_runs_once_through_agy_and_the_answer_uses_it(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agy calls the agent's tool through the MCP bridge (`host_helpers.TOOL_SCENARIO`)."""
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    runs: list[dict[str, Any]] = []

    async def execute(tool_call_id: str, params: dict[str, Any], *_: Any) -> Any:
        runs.append(dict(params))
        return core.AgentToolResult(
            content=[core.TextContent(text=tool_output(params["order_id"]))]
        )

    lookup = core.AgentTool(
        name="lookup_order",
        description="Look up an order's status by its id.",
        parameters=core.AgentToolSchema(
            properties={"order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
            required=["order_id"],
        ),
        execute=execute,
    )
    agent = core.Agent(core.AgentOptions(stream_fn=stream_fn(), session_id="pi-agent-core-tool"))
    agent.set_model(model())
    agent.set_tools([lookup])
    await agent.prompt("Where is my order A-1042?")
    await wait_for_turns()
    assert runs == [tool_arguments()]
    roles = [m.role for m in agent.state.messages]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    final = agent.state.messages[-1]
    assert final.stop_reason == "stop" and text_of(final) == tool_answer()
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []
