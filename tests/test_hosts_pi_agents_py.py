"""agy for pi-agents-py, with the real `pi_agents` (extra `hosts`) on agy-sim: a turn routed by its
API registry, a two-prompt `Agent` (one agy conversation through `stream_fn(session_id=...)`,
since its Agent forwards no session id).

No abort test through the host: pi-agents-py 0.58.3's `Agent.abort()` sets an event it never
creates and its loop hands the stream function no signal, so nothing can reach the turn (README,
"Hosts")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import need

from agy_provider.agy.models import list_models
from agy_provider.live.provider import wait_for_turns

need("pi_agents", "pi-agents-py", "hosts")
from pi_agents.agent.agent import Agent  # noqa: E402
from pi_agents.ai import stream as pi_stream  # noqa: E402
from pi_agents.ai import types as pi  # noqa: E402

from agy_provider.hosts.pi_agents_py import model  # noqa: E402
from agy_provider.hosts.pi_agents_py import models  # noqa: E402
from agy_provider.hosts.pi_agents_py import register  # noqa: E402
from agy_provider.hosts.pi_agents_py import stream_fn  # noqa: E402
from agy_provider.hosts.pi_agents_py import unregister  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def registered() -> Iterator[None]:
    register()
    yield
    unregister()


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_models_are_agys(live_env: Path) -> None:
    assert [m.id for m in models()] == ["default", *(m.id for m in list_models(agy_sim_path()))]
    assert all(m.api == "agy" for m in models())


async def test_a_turn_routed_by_the_api_registry(live_env: Path, registered: None) -> None:
    context = pi.Context(system_prompt="Be brief.", messages=[pi.UserMessage(content="hello")])
    stream = pi_stream.stream_simple(model("gemini-3.7-flash"), context, pi.SimpleStreamOptions())
    kinds = [event["type"] async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    assert kinds[0] == "start" and kinds[-1] == "done" and "text_delta" in kinds
    assert isinstance(message, pi.AssistantMessage) and message.stop_reason == "stop"
    assert text_of(message) == scenario_answer("default")
    assert leftovers(live_env) == []


async def test_unregister_removes_the_route(live_env: Path) -> None:
    register()
    unregister()
    with pytest.raises(ValueError, match="agy"):
        pi_stream.stream_simple(model(), pi.Context(messages=[pi.UserMessage(content="hi")]))


@pytest.mark.parametrize("session_id", ["pi-agents-py", None])
async def test_a_two_prompt_agent_is_one_agy_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, session_id: str | None
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    agent = Agent(
        {
            "initial_state": {"model": model("gemini-3.7-flash")},
            "stream_fn": stream_fn(session_id=session_id),
        }
    )
    await agent.prompt("count with me")
    first = [text_of(m) for m in agent.state.messages if m.role == "assistant"]
    await agent.prompt("next")
    await wait_for_turns()
    second = [text_of(m) for m in agent.state.messages if m.role == "assistant"]
    assert agent.state.error is None
    assert first[-1] == scenario_answer("two-turn", 0) and second[-1] == scenario_answer(
        "two-turn", 1
    )
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []


async def test_the_agents_tool_runs_once_through_agy_and_the_answer_uses_it(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agy calls the agent's tool through the MCP bridge (`host_helpers.TOOL_SCENARIO`)."""
    from pi_agents.agent.types import AgentTool
    from pi_agents.agent.types import AgentToolResult

    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    runs: list[dict[str, Any]] = []

    class Lookup(AgentTool):  # type: ignore[misc]
        async def execute(
            self,
            tool_call_id: str,
            params: dict[str, Any],
            signal: Any = None,
            on_update: Any = None,
        ) -> AgentToolResult:
            runs.append(dict(params))
            return AgentToolResult(content=[pi.TextContent(text=tool_output(params["order_id"]))])

    lookup = Lookup(
        name="lookup_order",
        description="Look up an order's status by its id.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
            "required": ["order_id"],
        },
    )
    agent = Agent(
        {
            "initial_state": {"model": model(), "tools": [lookup]},
            "stream_fn": stream_fn(session_id="pi-agents-py-tool"),
        }
    )
    await agent.prompt("Where is my order A-1042?")
    await wait_for_turns()
    assert agent.state.error is None
    assert runs == [tool_arguments()]
    assert [m.role for m in agent.state.messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]
    assert text_of(agent.state.messages[-1]) == tool_answer()
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []
