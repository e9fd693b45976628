"""No warm agy outlives its host, however the host ends: a normal exit, an exception, Ctrl-C,
SIGTERM, SIGHUP or SIGKILL (the lifeline). And a warm agy outlives the host's event loop: a
second `asyncio.run` of the same host continues the conversation in the same agy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from live_helpers import live_env  # noqa: F401

pytestmark = pytest.mark.slow

HOST = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from agy_provider import Context, SimpleStreamOptions, UserMessage, stream_simple
    from agy_provider.pi.agy_model import agy_model
    from agy_provider.live.warm.pool import POOL

    async def turn(messages, text):
        messages.append(UserMessage(content=text, timestamp=0))
        stream = stream_simple(
            agy_model("gemini-3.7-flash"),
            Context(messages=list(messages)),
            SimpleStreamOptions(session_id="host"),
        )
        message = await stream.result()
        assert message.stop_reason == "stop", message.error_message
        messages.append(message)

    def kept():
        return {a.conversation_id: a.pid for a in POOL.agys() if not a.spare}

    how = sys.argv[1]
    messages = []
    asyncio.run(turn(messages, "one"))
    first = kept()
    if how == "two-runs":
        asyncio.run(turn(messages, "two"))
        print(json.dumps({"first": first, "second": kept()}), flush=True)
        sys.exit(0)
    print(json.dumps([a.pid for a in POOL.agys()]), flush=True)
    if how == "exception":
        raise RuntimeError("the host failed")
    if how == "exit":
        sys.exit(0)
    time.sleep(120)  # until the test signals it
    """
)


def run_host(tmp_path: Path, how: str) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / "host.py"
    script.write_text(HOST)
    host = subprocess.Popen(
        [sys.executable, str(script), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "AGY_WARM_SPARES": "1"},
    )
    assert host.stdout is not None
    line = host.stdout.readline()
    assert line, host.stderr.read() if host.stderr else ""
    return host, line


@pytest.mark.parametrize("how", ["exit", "exception", "SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_no_warm_agy_outlives_its_host(
    live_env: Path,  # noqa: F811
    tmp_path: Path,
    how: str,
) -> None:
    host, line = run_host(tmp_path, how.lower() if how in ("exit", "exception") else how)
    pids = json.loads(line)
    assert pids, "the host kept no warm agy"
    warm = [psutil.Process(pid) for pid in pids]
    if how.startswith("SIG"):
        host.send_signal(getattr(signal, how))
    host.wait(60)
    _, alive = psutil.wait_procs(warm, timeout=30)
    assert not alive, f"{how}: warm agy still running: {[p.pid for p in alive]}"


def test_a_warm_agy_outlives_the_hosts_event_loop(
    live_env: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    host, line = run_host(tmp_path, "two-runs")
    runs = json.loads(line)
    assert host.wait(60) == 0
    # The conversation's agy answered the second asyncio.run's turn too: the same process.
    assert len(runs["first"]) == 1
    assert runs["second"] == runs["first"]
