"""Many turns at once in one state folder and one event loop, against agy-sim.

Each agy gets the same prompt but its own scenario (a `scenario.json` in its own working folder),
so a turn that bound another run's database would stream another run's answer. Expectations
come from the scenario files written here; nothing is compared with an earlier run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import leftovers
from live_helpers import terminal

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.runner import AgyProcess
from agy_provider.live.runner import TurnRequest
from agy_provider.live.turn import TurnEdges
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow


def write_scenario(folder: Path, number: int, chunk_ms: int = 60) -> str:
    """A scenario answering with words only this run says, in three chunks; returns the answer."""
    chunks = [f"Run {number} ", f"says {number * 7} ", f"and ends {number}."]
    scenario = {
        "name": f"run-{number}",
        "description": "one of many concurrent runs",
        "title": f"Run {number}",
        "turns": [
            {
                "steps": [
                    {
                        "type": "planner",
                        "thinking": [],
                        "text": chunks,
                        "chunk_ms": chunk_ms,
                        "first_token_ms": chunk_ms,
                        "usage": {"input": 10, "thinking": 0, "response": 5, "cache_read": 0},
                    }
                ]
            }
        ],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.json").write_text(json.dumps(scenario))
    return "".join(chunks)


def created_by_pid(app: Path) -> dict[int, str]:
    """Ground truth from agy-sim's own logs: which process created which conversation."""
    found: dict[int, str] = {}
    for log in (app / "log").glob("cli-*.log"):
        tail = log.stem.rsplit("-", 1)[1]
        if not tail.isdigit():
            continue  # a log file named by agy-provider (rpc turns), not by agy-sim's pid
        pid = int(tail)
        match = re.search(r"Created conversation (\S+)", log.read_text())
        if match:
            found[pid] = match.group(1)
    return found


async def run_many(
    tmp_path: Path,
    count: int,
    *,
    edges: TurnEdges | None = None,
    event_source: str | None = None,
    chunk_ms: int = 60,
) -> list[tuple[list[Any], str, Any]]:
    """`count` turns at once, same prompt, each in its own folder with its own scenario."""
    turns = []
    for number in range(count):
        folder = tmp_path / f"work-{number}"
        answer = write_scenario(folder, number, chunk_ms)
        stream = stream_simple(
            MODEL,
            Context(messages=[UserMessage(content="the same prompt for everyone", timestamp=0)]),
            SimpleStreamOptions(),
            cwd=str(folder),
            event_source=event_source,
            edges=edges,
        )
        turns.append((stream, answer))

    async def collect(stream: Any) -> tuple[list[Any], Any]:
        events = [event async for event in stream]
        return events, await stream.result()

    results = await asyncio.wait_for(asyncio.gather(*(collect(stream) for stream, _ in turns)), 240)
    await wait_for_turns()
    return [
        (events, answer, message)
        for (events, message), (_, answer) in zip(results, turns, strict=True)
    ]


@pytest.mark.parametrize("output_format", ["stream-json", ""])
async def test_identical_prompts_in_one_state_folder_never_misbind(
    live_env: Path,
    recorder: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    output_format: str,
) -> None:
    """With agy's stated id (stream-json) and without it (our tree's open files) alike."""
    monkeypatch.setenv("AGY_SIM_SCENARIO", "scenario.json")  # relative: each run's own cwd
    if not output_format:
        # Proof by open files needs agy alive long enough to be seen holding its database; an
        # agy that states nothing and exits first cannot be bound (the turn says so, tested in
        # test_discovery). Real turns take seconds; these take ~0.5 s.
        monkeypatch.setenv("AGY_SIM_SPEED", "1")

    def spawn(request: TurnRequest) -> AgyProcess:
        return AgyProcess(dataclasses.replace(request, output_format=output_format))

    # Without a stated id, a slower answer too: on a machine busy with other tests (xdist workers,
    # CPU hogs) agy must still be alive, its database open, when the binding looks for it.
    chunk_ms = 60 if output_format else 500
    results = await run_many(tmp_path, 6, edges=TurnEdges(spawn=spawn), chunk_ms=chunk_ms)
    for events, answer, message in results:
        expect_done(events, message, answer)
    truth = created_by_pid(live_env)
    assert len(recorder.turns) == 6
    for turn in recorder.turns:
        assert turn.binding.conversation_id == truth[turn.process.pid]
    assert len({t.binding.conversation_id for t in recorder.turns}) == 6
    assert leftovers(live_env, recorder) == []


async def test_twenty_concurrent_rpc_turns_all_finish_and_all_stream(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "scenario.json")
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "rpc")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    # A little longer than the default scenario's answer (~2 s): agy's server must be found and
    # proved ours while twenty of them start at once on a small machine.
    results = await run_many(tmp_path, 20, event_source="rpc", chunk_ms=500)
    for events, answer, message in results:
        assert isinstance(terminal(events), DoneEvent), message.error_message
        expect_done(events, message, answer)
        deltas = [e for e in events if e.type == "text_delta"]
        assert len(deltas) >= 2, "the answer arrived in one piece, not streamed"
    assert leftovers(live_env, recorder) == []


def test_turns_started_together_as_a_processs_first_all_run(live_env: Path) -> None:
    """A fresh process whose first turns start at once: the first imports the turn machinery in
    a worker; the others, started while that import is under way, must wait for it rather than
    call into a half-imported module."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import asyncio, json, sys
        from agy_provider import Context, UserMessage, stream_simple

        def turn(k):
            return stream_simple("default", Context(messages=[UserMessage(content=f"hi {k}",
                                 timestamp=0)]))

        async def main():
            streams = [turn(0)]
            # The others start once the first turn's import of the machinery is under way.
            while "agy_provider.live.turn_start" not in sys.modules:
                await asyncio.sleep(0.0005)
            streams += [turn(k) for k in range(1, 4)]
            finals = [await s.result() for s in streams]
            print(json.dumps([(m.stop_reason, m.error_message) for m in finals]))

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    finals = json.loads(done.stdout.splitlines()[-1])
    assert finals == [["stop", None]] * 4, finals
