"""The OpenAI Agents SDK (`openai-agents`) against `agy-provider serve` with its default model,
`OpenAIResponsesModel` (the Responses API): a streamed run, and an agent whose `@function_tool`
agy calls through the bridge.

An optional tier (extra `clients`); the tests skip, saying how to install it, where it is absent.
"""

from __future__ import annotations

from typing import Any

import pytest
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

agents = pytest.importorskip(
    "agents", reason="openai-agents is not installed: pip install -e '.[clients]'"
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    # The SDK uploads traces to OpenAI by default; a test talks to loopback only.
    agents.set_tracing_disabled(True)


def responses_model(served: Served) -> Any:
    """The SDK's default model class on a client whose base URL is the server."""
    return agents.OpenAIResponsesModel(model="default", openai_client=served.openai())


async def test_agents_streamed_run(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    agent = agents.Agent(
        name="assistant", instructions="You are helpful.", model=responses_model(served)
    )
    run = agents.Runner.run_streamed(agent, "Hi")
    deltas = [
        event.data.delta
        async for event in run.stream_events()
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
    ]
    assert "".join(deltas) == run.final_output == scenario_answer("default")
    usage = run.context_wrapper.usage
    assert usage.output_tokens > 0 and usage.input_tokens > 0


async def test_agents_function_tool_called_by_agy(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    monkeypatch.setenv("AGY_SIM_SPEED", "10")
    calls: list[dict[str, Any]] = []

    def lookup_order(order_id: str, verbose: bool = False) -> str:
        """Look up an order's status by its id."""
        calls.append({"order_id": order_id, "verbose": verbose})
        return tool_output(order_id)

    agent = agents.Agent(
        name="support",
        instructions="You are helpful.",
        tools=[agents.function_tool(lookup_order)],  # the decorator, applied by hand for mypy
        model=responses_model(served),
    )
    result = await agents.Runner.run(agent, "Where is my order A-1042?")
    assert calls == [tool_arguments()]
    assert result.final_output == tool_answer()
    assert len(conversations(served.app)) == 1  # the parked agy turn was resumed
