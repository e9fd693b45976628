"""Binding a turn to its database: by the id agy states, the id resumed, or our open files."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import psutil
import pytest
from live_helpers import expect_done
from live_helpers import run_turn
from live_helpers import scenario_answer
from waiting import until_true

from agy_provider.errors import TurnError
from agy_provider.live.discovery import bind_database
from agy_provider.live.runner import AgyProcess
from agy_provider.live.runner import TurnRequest

CID = "5f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


class Agy:
    """A binding subject: what agy stated, whether it exited, and its (empty) process tree."""

    def __init__(self, stated: str = "", returncode: int | None = None) -> None:
        self.stated_conversation_id = stated
        self.returncode = returncode
        self.id_stated = asyncio.Event()
        self.scans = 0

    async def scan_tree(self) -> list[psutil.Process]:
        self.scans += 1
        return []

    async def finish_stdout(self, timeout: float) -> None:
        return None


async def test_the_stated_id_binds_without_scanning_or_reading(tmp_path: Path) -> None:
    other = tmp_path / "00000000-0000-4000-8000-000000000000.db"
    other.write_bytes(b"")  # another run's new database: never a candidate
    (tmp_path / f"{CID}.db").write_bytes(b"")
    agy = Agy(stated=CID)
    binding = await bind_database(tmp_path, set(), agy, prompt="hi", timeout=5)
    assert binding.conversation_id == CID and agy.scans == 0


async def test_an_agy_that_states_nothing_and_exits_unseen_is_not_guessed(tmp_path: Path) -> None:
    (tmp_path / f"{CID}.db").write_bytes(b"")  # the only new database, but nothing proves it
    agy = Agy(returncode=0)
    with pytest.raises(TurnError, match="could not prove which database"):
        await bind_database(tmp_path, set(), agy, prompt="hi", timeout=5, states_id=False)
    assert agy.scans >= 1  # it looked at our tree's open files, and found none


async def test_a_different_stated_id_than_the_resumed_one_is_refused(tmp_path: Path) -> None:
    resumed = "11111111-1111-4111-8111-111111111111"
    (tmp_path / f"{resumed}.db").write_bytes(b"")
    with pytest.raises(TurnError, match="not reading either"):
        await bind_database(
            tmp_path, set(), Agy(stated=CID), prompt="hi", timeout=5, expected_id=resumed
        )


class ExitedAgy(Agy):
    """An agy that exited before the loop read its stdout: the id comes out only when asked."""

    def __init__(self, unread: str) -> None:
        super().__init__(returncode=0)
        self.unread = unread

    async def finish_stdout(self, timeout: float) -> None:
        self.stated_conversation_id, self.unread = self.unread, ""
        self.id_stated.set()


async def test_an_exit_seen_before_the_stated_id_still_binds(tmp_path: Path) -> None:
    (tmp_path / f"{CID}.db").write_bytes(b"")
    # Before: the exit ended binding at once, "… did not appear (agy exited first)".
    binding = await bind_database(tmp_path, set(), ExitedAgy(CID), prompt="hi", timeout=5)
    assert binding.conversation_id == CID


# An agy that writes its database and exits, while the `init` line naming it is printed only
# after that, by a child still holding agy's stdout, once the gate file exists.
LATE_AGY = """
import os, subprocess, sys
open(os.environ["LATE_DB"], "wb").close()
subprocess.Popen([sys.executable, "-c", '''
import json, os, sys, time
while not os.path.exists(os.environ["LATE_GATE"]):
    time.sleep(0.01)
line = {"event": "init", "conversation_id": os.environ["LATE_CID"], "init": {}}
sys.stdout.write(json.dumps(line) + "\\\\n")
'''])
"""


async def test_binding_reads_agy_stdout_to_its_end_after_agy_exited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agy_provider.live.discovery")
    folder = tmp_path / "conversations"
    folder.mkdir()
    fake = tmp_path / "agy"
    fake.write_text(f"#!{sys.executable}\n{LATE_AGY}")
    fake.chmod(0o755)
    gate = tmp_path / "gate"
    env = {"LATE_DB": str(folder / f"{CID}.db"), "LATE_GATE": str(gate), "LATE_CID": CID}
    process = AgyProcess(TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=str(fake), env=env))
    await process.start()
    try:
        binding = asyncio.ensure_future(
            bind_database(folder, set(), process, prompt="hi", timeout=30)
        )
        # The id is printed only once binding has given up (the bug) or reads on after the exit.
        await until_true(
            lambda: binding.done() or "rest of its stdout" in caplog.text,
            "binding gave up or read on after agy's exit",
        )
        gate.touch()
        assert (await binding).conversation_id == CID
    finally:
        await process.terminate(grace=0.5)


@pytest.mark.slow
async def test_a_relative_state_folder_binds_when_the_turn_runs_elsewhere(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGY_APP_DATA_DIR", "relative-state")  # as a user may write it
    monkeypatch.setenv("ANTIGRAVITY_APP_DATA_DIR", "relative-state")
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    events, message = await run_turn("hello", cwd=str(elsewhere))
    # Before: agy wrote under project/relative-state, the turn watched ./relative-state and
    # failed ("conversation …'s database did not appear").
    expect_done(events, message, scenario_answer("default"))
    assert list((tmp_path / "relative-state" / "conversations").glob("*.db"))
