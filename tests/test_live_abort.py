"""The host's abort lands in every phase of a real turn (agy-sim), and leaves no process behind.

No wall-clock assertion: an abort during agy's cold start is shown to land *before* agy wrote
anything (no conversation database exists), which a late abort could not produce.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from live_helpers import agy_processes
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import run_turn
from waiting import until_true

from agy_provider.pi.options import AbortSignal

pytestmark = pytest.mark.slow


def slow_start_scenario(folder: Path) -> Path:
    scenario = json.loads(
        (Path(__file__).parents[1] / "agy_provider/sim/scenarios/default.json").read_text()
    )
    scenario["name"] = "slow-start"
    scenario["cold_start_ms"] = 60_000  # agy signing in, starting its server: a minute
    path = folder / "slow-start.json"
    path.write_text(json.dumps(scenario))
    return path


@pytest.mark.parametrize("source", ["sqlite", "rpc"])
async def test_an_abort_during_the_cold_start_lands_before_agy_writes_anything(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    monkeypatch.setenv("AGY_EVENT_SOURCE", source)
    if source == "rpc":
        monkeypatch.delenv("AGY_SIM_NO_SERVER")
    signal = AbortSignal()

    def in_cold_start() -> bool:
        """agy-sim says in its log that its cold start has begun."""
        logs = (live_env / "log").glob("*.log")
        return any("agy-sim cold start:" in log.read_text() for log in logs)

    def asking_its_version() -> bool:
        """agy's version is asked beside the turn, by an `agy --version` of its own: an abort does
        not end that short question, which would still be seen running after the turn."""
        for proc in agy_processes(live_env):
            with contextlib.suppress(psutil.Error):  # it may end while looked at
                if "--version" in proc.cmdline():
                    return True
        return False

    async def abort_in_the_cold_start() -> None:
        await until_true(in_cold_start, "agy-sim began its cold start")
        await until_true(lambda: not asking_its_version(), "agy answered --version", off_loop=True)
        signal.abort("test")

    aborter = asyncio.create_task(abort_in_the_cold_start())
    events, message = await asyncio.wait_for(run_turn("hello", signal=signal), 50)
    await aborter
    expect_error(events, message, reason="aborted")
    assert not list((live_env / "conversations").glob("*.db")), "agy got past its cold start"
    assert leftovers(live_env, recorder) == []
