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
