"""A host that dies outright (SIGKILL) leaves nothing behind: the lifeline ends agy's groups and
removes the bridge folder, and the next bridge start sweeps folders of owners that are gone.

Every host here is a real Python process; agy is agy-sim, or `sleep` where only process groups
matter. "Gone" is polled with a bound, never timed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from lifeline_helpers import GONE_WITHIN
from lifeline_helpers import STARTUP
from lifeline_helpers import alive
from lifeline_helpers import gone_within
from lifeline_helpers import host
from lifeline_helpers import lifeline_of
from lifeline_helpers import read_line
from lifeline_helpers import turn_env
from live_helpers import agy_processes

from agy_provider.bridge.mcp_bridge import HostToolBridge
from agy_provider.bridge.mcp_bridge import sweep_stale_folders
from agy_provider.contract.host_tools import HostTool
from agy_provider.contract.host_tools import HostToolCall

# --- process groups ---------------------------------------------------------------------------

GROUPS_HOST = """
import subprocess, threading, time
from agy_provider import lifeline
def sleeper():
    return subprocess.Popen(["sleep", "300"], start_new_session=True)
kept = [sleeper() for _ in range(8)]
forgotten, unknown = sleeper(), sleeper()
# Guarded from many threads at once, as turns on several loops and worker threads spawn.
threads = [threading.Thread(target=lifeline.guard, args=(p.pid,)) for p in [*kept, forgotten]]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
lifeline.forget(forgotten.pid)
print("kept", *(p.pid for p in kept), flush=True)
print("others", forgotten.pid, unknown.pid, lifeline.supervisor_pid(), flush=True)
time.sleep(300)
"""


def test_a_killed_host_ends_the_groups_it_guarded_and_no_other(tmp_path: Path) -> None:
    with host(GROUPS_HOST, dict(os.environ), tmp_path) as proc:
        kept = [psutil.Process(int(pid)) for pid in read_line(proc, "kept ").split()]
        forgotten, unknown, supervisor = (
            psutil.Process(int(pid)) for pid in read_line(proc, "others ").split()
        )
        try:
            proc.kill()
            proc.wait()
            assert gone_within([*kept, supervisor], GONE_WITHIN) == []
            # The supervisor has ended: what it left alive, it leaves alive.
            assert alive([forgotten, unknown]) == [forgotten, unknown]
        finally:
            for leftover in alive([*kept, forgotten, unknown]):
                leftover.kill()


def test_the_lifeline_ends_with_a_host_that_ends_normally(tmp_path: Path) -> None:
    script = (
        "from agy_provider import lifeline\n"
        "lifeline.keep_folder('/nonexistent-agy-provider-folder')\n"
        "print('pid', lifeline.supervisor_pid(), flush=True)\n"
    )
    with host(script, dict(os.environ), tmp_path) as proc:
        supervisor = psutil.Process(int(read_line(proc, "pid ")))
        assert proc.wait(STARTUP) == 0
        assert gone_within([supervisor], GONE_WITHIN) == []


# --- a real turn: agy-sim hanging, with a host tool bridge -------------------------------------

TURN_HOST = """
import asyncio, os
from agy_provider import Context, Model, SimpleStreamOptions, Tool, UserMessage, stream_simple

MODEL = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
              base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
TOOL = Tool(name="lookup_order", description="Look up an order",
            parameters={"type": "object", "properties": {"order_id": {"type": "string"}}})

async def main():
    context = Context(messages=[UserMessage(content="hi", timestamp=0)], tools=[TOOL])
    text = ""
    async for event in stream_simple(MODEL, context, SimpleStreamOptions()):
        if event.type == "text_delta":
            text += event.delta
            if text == os.environ["HANG_TEXT"]:
                # agy-sim has written all it will; a moment more for its last stdout line (a
                # host gone before it would end agy-sim by EPIPE, hiding what this test is for).
                await asyncio.sleep(1.0)
                print("hanging", flush=True)
    print("ended", flush=True)

asyncio.run(main())
"""


def bridge_folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("agy-provider-mcp-*"))


@pytest.mark.slow
def test_a_sigkilled_host_leaves_no_agy_and_no_bridge_folder(tmp_path: Path) -> None:
    with host(TURN_HOST, turn_env(tmp_path), tmp_path) as proc:
        read_line(proc, "hanging")  # agy-sim streamed part of its answer, and hangs
        supervisor = lifeline_of(proc.pid)
        turn = [p for p in psutil.Process(proc.pid).children(recursive=True) if p != supervisor]
        assert any("agy-sim" in " ".join(p.cmdline()) for p in turn), turn
        assert len(bridge_folders(tmp_path)) == 1
        proc.kill()
        proc.wait()
        # Before: agy-sim and its language server lived on for minutes, the folder for good.
        left = gone_within([*turn, supervisor], GONE_WITHIN)
        described = [(p.pid, p.cmdline()) for p in left]
        for leftover in left:  # not left for the next test either
            with contextlib.suppress(psutil.Error):
                leftover.kill()
        assert left == [], described
        assert agy_processes(tmp_path / "agy-state") == []
        assert bridge_folders(tmp_path) == []


BRIDGE_HOST = """
import asyncio
from agy_provider.bridge.mcp_bridge import HostToolBridge
from agy_provider.contract.host_tools import HostTool

async def main():
    async with HostToolBridge([HostTool("t", "a tool")], lambda call: None) as bridge:
        print("folder", bridge.config_dir, flush=True)
        await asyncio.sleep(300)

asyncio.run(main())
"""


async def test_the_next_bridge_start_sweeps_the_folder_of_a_host_that_is_gone(
    tmp_path: Path,
) -> None:
    """A host killed together with its lifeline (nothing of it could clean up): its folder,
    token inside, is removed by the next bridge that starts beside it."""
    env = turn_env(tmp_path)
    with host(BRIDGE_HOST, env, tmp_path) as proc:
        folder = Path(read_line(proc, "folder "))
        lifeline_of(proc.pid).kill()
        proc.kill()
        proc.wait()
    assert folder.is_dir()

    async def handler(call: HostToolCall) -> str:
        return ""

    async with HostToolBridge([HostTool("t", "a tool")], handler, parent_dir=env["TMPDIR"]) as b:
        # Before: the dead host's folder stayed, its token readable for as long as /tmp lives.
        assert not folder.exists()
        assert [Path(b.config_dir)] == bridge_folders(tmp_path)


def test_the_sweep_removes_only_folders_of_owners_that_are_gone(tmp_path: Path) -> None:
    me = psutil.Process()
    stamp = round(me.create_time() * 100)
    ended = subprocess.Popen(["true"])
    ended.wait()
    names = {
        "live": f"agy-provider-mcp-{me.pid}-{stamp}-abc",
        "dead": f"agy-provider-mcp-{ended.pid}-{stamp + 1}-abc",
        "reused pid": f"agy-provider-mcp-{me.pid}-{stamp - 500}-abc",
        "older version": "agy-provider-mcp-x1y2z3",
        "not ours": "something-else-1-2-",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    removed = sweep_stale_folders(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / names[k]) for k in ("dead", "reused pid"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("live", "older version", "not ours")
    )
