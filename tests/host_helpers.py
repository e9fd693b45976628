"""Helpers for the host tests: a scenario agy is still starting in, waiting for agy to run, and
counting one test's agy conversations.

Each host test runs agy-sim through the host's own API; these say what agy does and what it left.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from live_helpers import agy_processes

ROOT = Path(__file__).resolve().parents[1]


def slow_start_scenario(folder: Path) -> Path:
    """The default scenario with a minute of cold start: a turn is surely running when aborted."""
    scenario = json.loads((ROOT / "agy_provider/sim/scenarios/default.json").read_text())
    scenario["name"] = "slow-start"
    scenario["cold_start_ms"] = 60_000
    path = folder / "slow-start.json"
    path.write_text(json.dumps(scenario))
    return path


async def until_agy_runs(app: Path, bound: float = 60.0) -> None:
    """Return once an agy process of this test's state folder is alive (a hang bound only)."""
    deadline = time.monotonic() + bound
    while not await asyncio.to_thread(agy_processes, app):
        assert time.monotonic() < deadline, "agy never started"
        await asyncio.sleep(0.02)


def conversations(app: Path) -> list[str]:
    """The agy conversations (database stems) this test's state folder holds."""
    return sorted(p.stem for p in (app / "conversations").glob("*.db"))


# A host's agent with a tool: agy-sim's scenario in which the model calls the host tool
# `lookup_order` (through the MCP bridge) and answers with what it returned.
TOOL_SCENARIO = "mcp-host-tool"
# The host tool that scenario calls: its JSON Schema.
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
    "required": ["order_id"],
}


def tool_arguments() -> dict[str, object]:
    """The arguments the scenario's model passes to the host tool."""
    from agy_provider.sim.scenario import PlannerSpec
    from agy_provider.sim.scenario import load_scenario

    (spec,) = (
        t.mcp
        for s in load_scenario(TOOL_SCENARIO).turn(0).steps
        if isinstance(s, PlannerSpec)
        for t in s.tools
        if t.mcp is not None
    )
    return dict(spec.arguments)


def tool_output(order_id: str) -> str:
    """What every test's `lookup_order` returns."""
    return f"order {order_id} shipped on 2026-11-28"


def tool_answer() -> str:
    """The scenario's answer once the host's tool answered `tool_output("A-1042")`."""
    from live_helpers import scenario_answer

    from agy_provider.sim.scenario import MCP_RESULT_PLACEHOLDER

    return scenario_answer(TOOL_SCENARIO).replace(MCP_RESULT_PLACEHOLDER, tool_output("A-1042"))
