"""The warm registry (`live/warm/registry.py`): real files in a temporary state folder, real
processes (`sleep`) standing in for live and dead hosts and agys."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agy_provider.cli.health import _duration
from agy_provider.live.warm import registry as warm_registry
from agy_provider.live.warm.registry import WarmEntry
from agy_provider.live.warm.registry import forget
from agy_provider.live.warm.registry import forget_host
from agy_provider.live.warm.registry import key_summary
from agy_provider.live.warm.registry import list_warm
from agy_provider.live.warm.registry import record
from agy_provider.live.warm.registry import rss_of
from agy_provider.live.warm.registry import warm_dir


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "state" / "sessions.json"))
    return tmp_path / "state" / "warm"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _entry(host: int, pid: int, **changes: object) -> WarmEntry:
    now = time.time()
    fields: dict[str, object] = dict(
        host_pid=host,
        pid=pid,
        key=key_summary("agy-sim", "gemini-3.8-flash-medium", "", "accept-edits", "/tmp/p"),
        conversation_id="c0ffee00-0000-4000-8000-000000000001",
        state="ready",
        started_at=now - 60,
        last_used=now - 5,
    )
    fields.update(changes)
    return WarmEntry(**fields)  # type: ignore[arg-type]


def test_a_recorded_entry_is_one_private_file_listed_back(
    state: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    entry = _entry(os.getpid(), sleeper.pid)
    record(entry)
    assert warm_dir() == state
    path = state / f"{os.getpid()}-{sleeper.pid}.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["key"] == "agy-sim · gemini-3.8-flash-medium · accept-edits · /tmp/p"
    assert {k: data[k] for k in ("host_pid", "pid", "state", "conversation_id")} == {
        "host_pid": os.getpid(),
        "pid": sleeper.pid,
        "state": "ready",
        "conversation_id": entry.conversation_id,
    }
    # The start times were filled in from the processes themselves.
    assert data["agy_started"] == psutil.Process(sleeper.pid).create_time()
    assert data["host_started"] == psutil.Process(os.getpid()).create_time()
    (listed,) = list_warm()
    assert listed.pid == sleeper.pid and listed.state == "ready" and listed.key == entry.key
    assert listed.idle_seconds(entry.last_used + 7) == 7.0
    assert [p.name for p in state.iterdir()] == [path.name]  # no temp file left behind


def test_recording_again_replaces_the_entry(sleeper: subprocess.Popen[bytes]) -> None:
    record(_entry(os.getpid(), sleeper.pid, state="spare", conversation_id=""))
    record(_entry(os.getpid(), sleeper.pid, state="in_turn"))
    (listed,) = list_warm()
    assert listed.state == "in_turn" and listed.idle_seconds(time.time() + 100) == 0.0


def test_forget_and_forget_host_remove_only_their_entries(state: Path) -> None:
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    host = subprocess.Popen(["sleep", "600"])
    try:
        record(_entry(os.getpid(), procs[0].pid))
        record(_entry(os.getpid(), procs[1].pid))
        record(_entry(host.pid, procs[2].pid))
        forget(os.getpid(), procs[0].pid)
        forget(os.getpid(), procs[0].pid)  # twice: nothing to do
        assert sorted(e.pid for e in list_warm()) == sorted([procs[1].pid, procs[2].pid])
        forget_host(os.getpid())
        assert [e.pid for e in list_warm()] == [procs[2].pid]
    finally:
        for proc in [*procs, host]:
            proc.kill()
            proc.wait()


def test_an_entry_whose_agy_or_host_is_gone_is_removed(
    state: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    host = subprocess.Popen(["sleep", "600"])
    dead = _dead_pid()
    record(_entry(os.getpid(), dead))  # agy gone
    record(_entry(host.pid, sleeper.pid))  # host about to go
    assert [e.pid for e in list_warm()] == [sleeper.pid]
    assert not (state / f"{os.getpid()}-{dead}.json").exists()
    host.kill()
    host.wait()
    assert list_warm() == []
    assert list(state.iterdir()) == []


def test_a_zombie_agy_is_gone(state: Path) -> None:
    proc = subprocess.Popen(["true"])
    record(_entry(os.getpid(), proc.pid, agy_started=None))
    # Wait for its exit without reaping it: the pid stays, a zombie, until proc.wait().
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    assert psutil.pid_exists(proc.pid)
    assert list_warm() == []
    proc.wait()


def test_a_reused_pid_is_not_the_warm_agy(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    started = psutil.Process(sleeper.pid).create_time()
    record(_entry(os.getpid(), sleeper.pid, agy_started=started - 3600))  # another process then
    assert list_warm() == []
    assert list(state.iterdir()) == []


def test_an_unreadable_file_is_skipped_with_a_log_line_and_kept(
    state: Path, sleeper: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    record(_entry(os.getpid(), sleeper.pid))
    broken = state / f"{os.getpid()}-1.json"
    broken.write_text("{not json")
    wrong = state / f"{os.getpid()}-2.json"
    wrong.write_text(json.dumps({**_entry(os.getpid(), 2).to_json(), "pid": "two"}))
    stranger = state / "notes.txt"
    stranger.write_text("left alone")
    with caplog.at_level(logging.WARNING, logger=warm_registry.__name__):
        assert [e.pid for e in list_warm()] == [sleeper.pid]
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert str(broken) in said and str(wrong) in said and "'pid'" in said
    assert broken.exists() and wrong.exists() and stranger.exists()


def test_an_empty_entry_of_a_host_that_is_gone_is_removed(
    state: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Entries are not fsynced: a machine's crash may leave one empty, of a host long gone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state.mkdir(parents=True)
    empty = state / f"{gone.pid}-{sleeper.pid}.json"
    empty.write_text("")
    assert list_warm() == []
    assert not empty.exists()


def test_a_file_named_for_other_pids_is_skipped(
    state: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    record(_entry(os.getpid(), sleeper.pid))
    moved = state / f"{os.getpid()}-{sleeper.pid + 100000}.json"
    (state / f"{os.getpid()}-{sleeper.pid}.json").rename(moved)
    assert list_warm() == []
    assert moved.exists()


def test_no_folder_lists_nothing() -> None:
    assert list_warm() == []
    forget_host(os.getpid())  # nothing to remove, no error


def test_rss_of_a_live_and_a_gone_process(sleeper: subprocess.Popen[bytes]) -> None:
    rss = rss_of(sleeper.pid)
    assert rss is not None and rss > 0
    assert rss_of(_dead_pid()) is None


def test_key_summary_leaves_out_empty_parts() -> None:
    assert key_summary("agy", "", " pro ", "/w") == "agy · pro · /w"


# -- `agy-provider status` lists them ----------------------------------------------------------

AGY_PROVIDER = os.path.join(os.path.dirname(sys.executable), "agy-provider")


def _status(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGY_", "ANTIGRAVITY_", "XDG_")) and k != "PYTEST_CURRENT_TEST"
    }
    env.update(
        HOME=str(tmp_path),
        PATH="/usr/bin:/bin",
        AGY_PROVIDER_SESSIONS=os.environ["AGY_PROVIDER_SESSIONS"],
    )
    return subprocess.run(
        [AGY_PROVIDER, "status", "--agy-bin", "agy-sim", *args],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_status_lists_the_warm_agys_of_live_hosts(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    none = _status(tmp_path)
    assert none.returncode == 0, none.stderr
    assert _rows(none.stdout)["warm agy"] == "none running"
    assert json.loads(_status(tmp_path, "--json").stdout)["warm"] == []
    spare = subprocess.Popen(["sleep", "600"])
    try:
        now = time.time()
        # This test process is the host; the sleeps are its warm agy and its spare.
        record(_entry(os.getpid(), sleeper.pid, state="ready", last_used=now - 192))
        record(_entry(os.getpid(), spare.pid, state="spare", conversation_id="", last_used=now))
        record(_entry(os.getpid(), _dead_pid()))  # gone: never shown
        asked = time.time()
        shown = _status(tmp_path)
        answered = time.time()
        as_json = json.loads(_status(tmp_path, "--json").stdout)
    finally:
        spare.kill()
        spare.wait()
    assert shown.returncode == 0, shown.stderr
    rows = _rows(shown.stdout)
    assert rows["warm agy"] == "2 running"
    ready = rows[f"warm pid {sleeper.pid}"].split(" · ")

    def idle(since: float) -> set[str]:
        """What `status` may say of an agy idle `since` seconds before `now`: a busy machine
        can take seconds to start it (idle times are shown in tenths, then whole seconds)."""
        first, last = since + asked - now, since + answered - now + 0.05
        return {f"idle {_duration(s)}" for s in range(int(first), int(last) + 1)}

    assert ready[0] == "ready" and ready[1] in idle(192)  # `3m12s` on an idle machine
    assert ready[2].endswith(" MiB")
    assert ready[3] == "conversation c0ffee00-0000-4000-8000-000000000001"
    assert ready[4:] == [
        "agy-sim", "gemini-3.8-flash-medium", "accept-edits", "/tmp/p", f"host pid {os.getpid()}"
    ]  # fmt: skip
    spare_row = rows[f"warm pid {spare.pid}"].split(" · ")
    assert spare_row[0] == "spare" and spare_row[1] in idle(0)
    assert "no conversation (spare)" in rows[f"warm pid {spare.pid}"]
    assert len([label for label in rows if label.startswith("warm pid")]) == 2
    warm = {entry["pid"]: entry for entry in as_json["warm"]}
    assert set(warm) == {sleeper.pid, spare.pid}
    assert warm[sleeper.pid]["state"] == "ready" and warm[sleeper.pid]["idle_seconds"] >= 192
    assert warm[sleeper.pid]["rss_bytes"] == pytest.approx(rss_of(sleeper.pid), rel=0.5)
    assert warm[spare.pid]["conversation_id"] == "" and warm[spare.pid]["host_pid"] == os.getpid()
    assert as_json["rows"]["warm agy"] == "2 running"


def _rows(text: str) -> dict[str, str]:
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines())
