"""The runner's edges: what agy's stdout states, its log's ports, and its version asked once per binary."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from live_helpers import agy_sim_path
from waiting import HANG_BOUND
from waiting import until_true

from agy_provider.errors import TurnError
from agy_provider.live import runner
from agy_provider.live.runner import AgyProcess
from agy_provider.live.runner import StdoutEvents
from agy_provider.live.runner import TurnRequest
from agy_provider.live.runner import agy_version
from agy_provider.rpc.language_server import LogPorts

CID = "5f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


def test_stdout_events_state_the_id_keep_the_result_and_skip_text() -> None:
    events = StdoutEvents()
    lines = [
        b"Error: authentication required. Run 'antigravity' to log in, then retry.\n",
        json.dumps({"event": "init", "conversation_id": CID, "init": {}}).encode() + b"\n",
        json.dumps({"event": "step_update", "step_update": {"conversation_id": "other"}}).encode()
        + b"\n",
        json.dumps({"event": "result", "result": {"status": "SUCCESS"}}).encode() + b"\n",
    ]
    blob = b"".join(lines)
    # Split anywhere: the id becomes known exactly once, at the chunk that completes `init`.
    became_known = [events.feed(blob[i : i + 7]) for i in range(0, len(blob), 7)]
    assert became_known.count(True) == 1
    assert events.conversation_id == CID  # the first id stated wins; later ones are steps'
    assert events.result == {"status": "SUCCESS"}
    assert b"authentication required" in events.text


def test_stdout_events_refuse_an_id_that_could_become_a_flag() -> None:
    events = StdoutEvents()
    events.feed(b'{"event":"init","conversation_id":"--rm"}\n')
    assert events.conversation_id == ""


def test_log_ports_reads_only_what_agy_appended(tmp_path: Path) -> None:
    log = tmp_path / "agy.log"
    ports = LogPorts(str(log))
    assert ports.read() == []  # not written yet
    log.write_bytes(b"I1130 10:00:00.000000 1 server.go:1] Language server listening on random ")
    assert ports.read() == []  # half a line
    with log.open("ab") as handle:
        handle.write(b"port at 40123 for HTTPS (gRPC)\nI1130 x] Language server listening on ")
        handle.write(b"random port at 40124 for HTTP\n")
    expected = ["http://127.0.0.1:40124", "https://127.0.0.1:40123"]  # plain first: no TLS
    assert ports.read() == expected
    assert ports.read() == expected


@pytest.fixture
def counting_agy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A real executable that prints a version and counts how often it was asked."""
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "state" / "sessions.json"))
    monkeypatch.setattr(runner, "_versions", {})
    counter = tmp_path / "count"
    binary = tmp_path / "agy"
    binary.write_text(f'#!/bin/sh\necho x >> "{counter}"\necho 1.2.13\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary, counter


async def test_agy_version_is_asked_once_for_many_turns(counting_agy: tuple[Path, Path]) -> None:
    binary, counter = counting_agy
    versions = await asyncio.gather(*(agy_version(str(binary)) for _ in range(10)))
    assert versions == ["1.2.13"] * 10
    assert counter.read_text().count("x") == 1


async def test_agy_version_survives_the_process_and_follows_the_binary(
    counting_agy: tuple[Path, Path],
) -> None:
    binary, counter = counting_agy
    assert await agy_version(str(binary)) == "1.2.13"
    runner._versions.clear()  # a new process: only the file remains
    assert await agy_version(str(binary)) == "1.2.13"
    assert counter.read_text().count("x") == 1
    # A new build at the same path (its size or mtime moved) is asked again.
    binary.write_text(binary.read_text().replace("1.2.13", "1.2.14"))
    os.utime(binary, ns=(0, binary.stat().st_mtime_ns + 1_000_000_000))
    assert await agy_version(str(binary)) == "1.2.14"
    assert counter.read_text().count("x") == 2


async def test_an_abandoned_start_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while the fork runs in its thread: the process it makes is killed anyway."""
    import threading

    import psutil

    from agy_provider.live.runner import AgyProcess
    from agy_provider.live.runner import TurnRequest

    script = tmp_path / "slow-agy"
    script.write_text("#!/bin/sh\nexec sleep 300\n")
    script.chmod(0o755)
    mark = f"AGY_TEST_ABANDONED={tmp_path.name}"
    request = TurnRequest(
        prompt="hi", cwd=str(tmp_path), agy_bin=str(script), env=dict([mark.split("=", 1)])
    )
    forked = threading.Event()  # the worker's fork returned: whatever it made exists now
    spawn = runner.spawn_agy

    def spawn_and_say(*args: Any, **kwargs: Any) -> Any:
        try:
            return spawn(*args, **kwargs)
        finally:
            forked.set()

    monkeypatch.setattr(runner, "spawn_agy", spawn_and_say)
    process = AgyProcess(request)
    task = asyncio.ensure_future(process.start())
    await asyncio.sleep(0)  # the fork is submitted to its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    def ours() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                env = proc.environ()
                if env.get("AGY_TEST_ABANDONED") == tmp_path.name and (
                    proc.status() != psutil.STATUS_ZOMBIE
                ):
                    found.append(proc)
        return found

    assert await asyncio.to_thread(forked.wait, HANG_BOUND), "the fork never returned"
    try:
        # Killed by the abandoned start's callback as soon as the fork returned (an ended process
        # is a zombie until reaped, and not counted); a leaked one runs `sleep 300` and stays.
        await until_true(lambda: not ours(), "the abandoned start's process was ended", every=0.05)
    finally:
        for proc in ours():
            proc.kill()


async def test_agy_and_everything_it_runs_know_they_are_inside_a_turn(tmp_path: Path) -> None:
    from agy_provider.live.runner import AgyProcess
    from agy_provider.live.runner import TurnRequest

    seen = tmp_path / "seen"
    script = tmp_path / "agy"
    script.write_text(f'#!/bin/sh\necho "$AGY_PROVIDER_TURN" > "{seen}"\n')
    script.chmod(0o755)
    process = AgyProcess(TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin=str(script)))
    await process.start()
    assert await process.wait(30) == 0
    assert seen.read_text().strip() == "1"  # AskAntigravity refuses to recurse on this


def test_descendants_from_proc_children_match_psutils_scan() -> None:
    import subprocess
    import time

    import psutil

    if not runner._PROC_CHILDREN:
        pytest.skip("no /proc/<pid>/task/<tid>/children here")
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & (sleep 30 & wait) & wait"])
    try:
        expected: list[int] = []
        for _ in range(100):  # until the shells have forked all three
            expected = sorted(p.pid for p in psutil.Process(shell.pid).children(recursive=True))
            if len(expected) >= 3:
                break
            time.sleep(0.02)
        found = runner._descendants(shell.pid)
        assert found is not None and sorted(p.pid for p in found) == expected
    finally:
        for proc in psutil.Process(shell.pid).children(recursive=True):
            proc.kill()
        shell.kill()
        shell.wait()


async def test_a_missing_working_folder_is_named_when_agy_cannot_start(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    process = AgyProcess(TurnRequest(prompt="hi", cwd=str(missing), agy_bin=agy_sim_path()))
    with pytest.raises(TurnError) as failure:
        await process.start()
    # Before: "could not start …/agy-sim: No such file or directory", as if agy were missing.
    assert str(missing) in str(failure.value)
