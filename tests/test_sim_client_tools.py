"""agy-sim's scenarios that call a client's own tool by name (`client-bash`: Claude Code's `Bash`,
`client-bash-pi`: the pi coding agent's `bash`), chosen by a prompt marker, the last one winning.

Through `agy-provider serve` and the official SDKs standing in for the coding agents: the call
arrives as the client's tool call with the scenario's arguments, and the answer quotes what the
client returned. The real clients run these in `tests/test_real_clients.py`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from host_helpers import conversations
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

from agy_provider.sim.plays import TurnPlays
from agy_provider.sim.scenario import MCP_RESULT_PLACEHOLDER
from agy_provider.sim.scenario import McpCallSpec
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario

SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
    "required": ["command"],
}


def client_call(scenario: str) -> McpCallSpec:
    """The one client tool call a scenario makes."""
    (spec,) = (
        t.mcp
        for s in load_scenario(scenario).turn(0).steps
        if isinstance(s, PlannerSpec)
        for t in s.tools
        if t.mcp is not None
    )
    return spec


def answer_with(scenario: str, result: str) -> str:
    """The scenario's answer once the client's tool returned `result`."""
    steps = load_scenario(scenario).turn(0).steps
    text = "".join(c for s in steps if isinstance(s, PlannerSpec) for c in s.text)
    return text.replace(MCP_RESULT_PLACEHOLDER, result)


@pytest.mark.parametrize(
    ("scenario", "tool"), [("client-bash", "Bash"), ("client-bash-pi", "bash")]
)
def test_the_client_tool_scenarios_call_the_clients_shell_by_its_name(
    scenario: str, tool: str
) -> None:
    spec = client_call(scenario)
    assert spec.tool == tool and spec.server == ""  # the first MCP server: the host's bridge
    assert "$((6 * 7))" in spec.arguments["command"]  # only a real shell prints 42 for it
    assert MCP_RESULT_PLACEHOLDER in answer_with(scenario, MCP_RESULT_PLACEHOLDER)


def test_the_last_marker_in_a_prompt_chooses_the_scenario() -> None:
    plays = TurnPlays(load_scenario("default"), environ={})
    history = "Earlier you were asked: run it [agy-sim:client-bash]\n\nNow: thanks"
    chosen = plays.for_turn(2, history + " [agy-sim:thinking]")
    assert chosen is not None and chosen.scenario.name == "thinking"
    only = plays.for_turn(1, history)
    assert only is not None and only.scenario.name == "client-bash"
    assert plays.for_turn(1, "no marker at all") is None


@pytest.mark.slow
async def test_claude_codes_bash_is_called_through_serve_and_its_output_answered(
    served: Served,
) -> None:
    client = served.anthropic()
    tools = [{"name": "Bash", "description": "Run a shell command", "input_schema": SHELL_SCHEMA}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Check. [agy-sim:client-bash]"}]
    first = await client.messages.create(
        model="default", max_tokens=1024, messages=messages, tools=tools
    )
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("Bash", dict(client_call("client-bash").arguments))
    ran = "agy-sim-42 (as Claude Code's shell would print it)"
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": ran}],
        },
    ]
    final = await client.messages.create(
        model="default", max_tokens=1024, messages=messages, tools=tools
    )
    said = "".join(b.text for b in final.content if b.type == "text")
    assert said == answer_with("client-bash", ran)
    assert len(conversations(served.app)) == 1  # the parked agy turn was resumed


@pytest.mark.slow
async def test_pis_bash_is_called_through_serve_and_its_output_answered(served: Served) -> None:
    client = served.openai()
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": SHELL_SCHEMA,
            },
        }
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Check. [agy-sim:client-bash-pi]"}
    ]
    first = await client.chat.completions.create(model="default", messages=messages, tools=tools)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "bash"
    assert json.loads(call.function.arguments) == dict(client_call("client-bash-pi").arguments)
    ran = "agy-sim-42"
    messages += [
        choice.message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": ran},
    ]
    second = await client.chat.completions.create(model="default", messages=messages, tools=tools)
    assert second.choices[0].message.content == answer_with("client-bash-pi", ran)
    assert len(conversations(served.app)) == 1


def test_the_read_image_scenario_reads_a_file_in_the_clients_folder() -> None:
    spec = client_call("client-read-image")
    assert spec.tool == "Read" and spec.server == ""
    assert dict(spec.arguments) == {"file_path": "agy-sim-pixel.png"}  # relative: its cwd
    assert MCP_RESULT_PLACEHOLDER in answer_with("client-read-image", MCP_RESULT_PLACEHOLDER)
