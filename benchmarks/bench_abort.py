"""Benchmark: how fast an abort lands, in each phase of a turn, per event source.

Goal (issue 8, item 5): the `aborted` error event reaches the caller ≤ 200 ms after the signal,
and no process of the turn survives. Phases:
- spawn: `signal.abort()` right after `stream_simple` returns;
- cold start: agy-sim's cold start made 8 s long (a scenario file in the temp folder; 2 s at
  AGY_SIM_SPEED=4), aborted 0.4 s after the call, before agy has written anything;
- streaming: aborted at the first text delta, three chunks before the end.
Processes of the turn: every descendant of this process seen while the turn ran; each is checked
when the error event arrives and again 1 s later. Baseline in the same run: agy-sim alone sent
SIGTERM at its first text line, to its exit (what ending agy costs at best).
Run: `.venv/bin/python benchmarks/bench_abort.py [--trials N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live
import psutil

from agy_provider.sim.scenario import load_scenario

SOURCES = ("sqlite", "rpc")
GOAL_MS = 200.0
COLD_START_MS = 8000
COLD_ABORT_AFTER = 0.4


def slow_start_scenario(folder: Path) -> Path:
    """The default scenario with an 8 s cold start, as a file agy-sim loads by path."""
    default = load_scenario("default")
    data = json.loads(
        (
            Path(__file__).resolve().parents[1] / "agy_provider/sim/scenarios/default.json"
        ).read_text()
    )
    data["name"] = "bench-slow-start"
    data["cold_start_ms"] = COLD_START_MS
    path = folder / "slow-start.json"
    path.write_text(json.dumps(data))
    assert default.cold_start_ms < COLD_START_MS
    return path


def alive(procs: dict[int, psutil.Process]) -> list[int]:
    out = []
    for pid, proc in procs.items():
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


async def aborted_turn(source: str, phase: str, cwd: Path) -> dict[str, Any]:
    from agy_provider import AbortSignal
    from agy_provider import Context
    from agy_provider import SimpleStreamOptions
    from agy_provider import UserMessage
    from agy_provider import stream_simple

    me = psutil.Process()
    seen: dict[int, psutil.Process] = {}

    def track() -> None:
        try:
            for child in me.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    abort = AbortSignal()
    stream = stream_simple(
        live.model(),
        Context(messages=[UserMessage(content=live.PROMPT, timestamp=0)]),
        SimpleStreamOptions(signal=abort),
        cwd=str(cwd),
        event_source=source,
    )
    called = time.perf_counter()
    signalled: float | None = None
    if phase == "spawn":
        signalled = time.perf_counter()
        abort.abort()

    async def tracker() -> None:
        while True:
            track()
            await asyncio.sleep(0.02)

    async def cold_abort() -> None:
        nonlocal signalled
        await asyncio.sleep(COLD_ABORT_AFTER)
        track()
        signalled = time.perf_counter()
        abort.abort()

    background = [asyncio.create_task(tracker())]
    if phase == "cold start":
        background.append(asyncio.create_task(cold_abort()))
    result: dict[str, Any] = {"ok": False, "reason": "", "latency": float("nan")}
    try:
        async with asyncio.timeout(live.TURN_DEADLINE):
            async for event in stream:
                if phase == "streaming" and event.type == "text_delta" and signalled is None:
                    track()
                    signalled = time.perf_counter()
                    abort.abort()
                if event.type in ("done", "error"):
                    now = time.perf_counter()
                    result["reason"] = getattr(event, "reason", "")
                    result["ok"] = event.type == "error" and event.reason == "aborted"
                    if signalled is not None:
                        result["latency"] = now - signalled
                    result["after_call"] = now - called
                    break
    except TimeoutError:
        result["reason"] = "no final event"
    finally:
        for task in background:
            task.cancel()
    result["seen"] = len(seen)
    result["at_event"] = len(alive(seen))
    await asyncio.sleep(1.0)
    result["after_1s"] = alive(seen)
    for pid in result["after_1s"]:
        live.end_tree(pid)  # never leave a leftover for the next trial
    return result


async def sim_sigterm(cwd: Path) -> float:
    """agy-sim alone, SIGTERM to its process group at its first text line, until it exits."""
    proc = await asyncio.create_subprocess_exec(
        live.agy_sim(),
        "-p",
        live.PROMPT,
        "--output-format",
        "stream-json",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(live.TURN_DEADLINE):
        while line := await proc.stdout.readline():
            if b'"text_delta"' in line:
                break
        started = time.perf_counter()
        os.killpg(proc.pid, signal.SIGTERM)
        await proc.wait()
    return time.perf_counter() - started


async def run(trials: int, cwd: Path, slow: Path, log: live.ProviderLog) -> list[str]:
    for source in SOURCES:  # imports, plugins, agy's version
        await live.timed_turn(source, cwd=cwd)
    log.warnings_text()
    floor = [await sim_sigterm(cwd) for _ in range(trials)]
    print(
        f"\n  baseline: agy-sim alone, SIGTERM at its first text line → exit: median "
        f"{live.median(floor) * 1000:.1f} ms, best {min(floor) * 1000:.1f} ms"
    )
    verdicts = []
    for phase in ("spawn", "cold start", "streaming"):
        if phase == "cold start":
            os.environ["AGY_SIM_SCENARIO"] = str(slow)
        else:
            os.environ.pop("AGY_SIM_SCENARIO", None)
        for source in SOURCES:
            results = [await aborted_turn(source, phase, cwd) for _ in range(trials)]
            lat = [float(r["latency"]) * 1000 for r in results if r["latency"] == r["latency"]]
            reasons = sorted({str(r["reason"]) for r in results})
            aborted = sum(bool(r["ok"]) for r in results)
            at_event = max(int(r["at_event"]) for r in results)
            later = max(len(r["after_1s"]) for r in results)
            worst = max(lat, default=float("nan"))
            print(
                f"  {phase:<11} {source:<7} abort → final event: median {live.median(lat):6.1f} ms, "
                f"worst {worst:6.1f} ms; {aborted}/{trials} ended `aborted` (reasons: {', '.join(reasons)}); "
                f"processes alive at the event {at_event}, 1 s later {later} "
                f"(of {max(int(r['seen']) for r in results)} seen)"
            )
            if log.warnings:
                print(log.warnings_text("      "))
            verdicts.append(
                f"  {phase:<11} {source:<7} ≤ {GOAL_MS:.0f} ms: "
                f"{'PASS' if worst <= GOAL_MS and aborted == trials else 'FAIL'} (worst {worst:.0f} ms, "
                f"{aborted}/{trials} aborted);  no survivor: {'PASS' if later == 0 else 'FAIL'} "
                f"({at_event} alive at the event, {later} a second later)"
            )
    os.environ.pop("AGY_SIM_SCENARIO", None)
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3, help="aborted turns per phase and source")
    args = parser.parse_args()
    live.run_header("bench_abort: signal → `aborted` event, per phase and source")
    print(
        f"  default scenario (cold start phase: cold_start_ms={COLD_START_MS}, aborted "
        f"{COLD_ABORT_AFTER:.1f} s after the call), AGY_SIM_SPEED={live.SIM_SPEED}"
    )
    with live.private_world("agy-bench-abort-") as tmp, live.ProviderLog().installed() as log:
        verdicts = asyncio.run(run(args.trials, tmp / "work", slow_start_scenario(tmp), log))
    print("\ngoal: the `aborted` event ≤ 200 ms after the signal; no process of the turn survives")
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
