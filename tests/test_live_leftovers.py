"""A process agy leaves running when it exits on its own (a background job, an updater) ends with the turn."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil
import pytest
from live_helpers import agy_sim_path
from live_helpers import expect_done
from live_helpers import leftovers
from live_helpers import run_turn
from live_helpers import scenario_answer

pytestmark = pytest.mark.slow


async def test_a_process_agy_leaves_behind_does_not_outlive_the_turn(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # agy with a background job (as a tool's `cmd &` or a server that outlives it would be):
    # the job is in agy's process group and carries agy's environment.
    wrapper = tmp_path / "agy-with-job"
    wrapper.write_text(
        f'#!/bin/sh\nsleep 300 </dev/null >/dev/null 2>&1 &\nexec "{agy_sim_path()}" "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("AGY_BIN", str(wrapper))
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer("default"))
    left = leftovers(live_env)
    for line in left:  # do not leave it for the next test either
        with contextlib.suppress(psutil.Error):
            psutil.Process(int(line.split()[0])).kill()
    assert left == [], f"processes of the turn still alive: {left}"
