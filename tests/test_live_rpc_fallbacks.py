"""rpc turns whose server or database misbehave still deliver what agy finished (agy-sim)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live_helpers import expect_done
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer

pytestmark = pytest.mark.slow


@pytest.fixture
def rpc_live(live_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "rpc")
    return live_env


@pytest.mark.parametrize("trial", range(2))
async def test_a_locked_database_under_rpc_completes_exactly(
    rpc_live: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch, trial: int
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "locked")
    events, message = await run_turn(f"locked {trial}")
    expect_done(events, message, scenario_answer("locked"))
    assert leftovers(rpc_live, recorder) == []


async def test_an_rpc_turn_whose_server_never_answers_finishes_from_the_database(
    rpc_live: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No language server at all: under `rpc` (not only `auto`) the database gives the answer.
    monkeypatch.setenv("AGY_SIM_NO_SERVER", "1")
    events, message = await run_turn("no server")
    expect_done(events, message, scenario_answer("default"))
    assert leftovers(rpc_live, recorder) == []
