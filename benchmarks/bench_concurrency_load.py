"""Benchmark: 50 concurrent turns per event source (rpc, sqlite, auto) beside CPU hogs.

Counts, per source, how many turns ended `done` with the scenario's answer (goal: all of them),
how many saved their session and how many distinct conversations they bound, and names every
other ending. Two busy loops (one per core on a 2-core box, as `.ci/with-cpu-hogs` makes them)
run for the whole benchmark. Issue 16 found 9–40 of 50 turns lost here ("database did not appear
(agy exited first)").
Run: `.venv/bin/python benchmarks/bench_concurrency_load.py [--turns 50] [--hogs 2]`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

SOURCES = ("rpc", "sqlite", "auto")
# How long the turns' session records may take to land after `done` (written after it).
SESSION_GRACE = 20.0


def scenario_answer(name: str = "default") -> str:
    """The text the scenario's first turn answers: its planners' chunks, in order."""
    from agy_provider.sim.scenario import PlannerSpec
    from agy_provider.sim.scenario import load_scenario

    steps = load_scenario(name).turn(0).steps
    return "".join(chunk for s in steps if isinstance(s, PlannerSpec) for chunk in s.text)


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[list[int]]:
    """`count` busy loops at normal priority, stopped however the benchmark ends."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(count)
    ]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


async def load_run(n: int, source: str, cwd: Path, answer: str) -> str:
    from agy_provider.store.sessions import SessionStore

    store = SessionStore()
    sessions = [f"load-{time.time_ns()}-{source}-{k}" for k in range(n)]
    started = time.perf_counter()
    turns = await asyncio.gather(
        *(live.timed_turn(source, cwd=cwd, session=s, store=store) for s in sessions)
    )
    wall = time.perf_counter() - started
    deadline = time.monotonic() + SESSION_GRACE
    while True:
        records = store.all()
        if all(s in records for s in sessions) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    saved = [s for s in sessions if s in records]
    bound = {records[s].conversation_id for s in saved}
    right = sum(t.ok and t.text == answer for t in turns)
    endings: collections.Counter[str] = collections.Counter()
    for turn in turns:
        if not turn.ok:
            endings[f"error: {live.ProviderLog._ID.sub('<id>', turn.error)[:200]}"] += 1
        elif turn.text != answer:
            endings[f"done with another answer: {turn.text[:80]!r}"] += 1
    lines = [
        f"  {source:<7} {right}/{n} done with the answer in {wall:5.1f} s; sessions saved "
        f"{len(saved)}/{n}; distinct conversations {len(bound)}",
    ]
    lines += [f"  {'':<7} ×{count} {ending}" for ending, count in endings.most_common()]
    verdict = "PASS" if right == n and len(saved) == n and len(bound) == n else "FAIL"
    lines.append(f"  {'':<7} goal {n}/{n}: {verdict}")
    return "\n".join(lines)


async def run(n: int, cwd: Path, log: live.ProviderLog) -> list[str]:
    answer = scenario_answer()
    for source in SOURCES:  # imports, plugins, agy's version: paid once, not measured
        await live.timed_turn(source, cwd=cwd)
    log.warnings_text()
    results = []
    for source in SOURCES:
        text = await load_run(n, source, cwd, answer)
        print(text, flush=True)
        warnings = log.warnings_text(" " * 10)
        if warnings:
            print(warnings, flush=True)
        results.append(text)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=50, help="concurrent turns per source")
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside them")
    args = parser.parse_args()
    live.run_header("bench_concurrency_load: concurrent turns beside CPU hogs")
    print(
        f"  {args.turns} turns at once per source, {args.hogs} busy loops, default scenario, "
        f"AGY_SIM_SPEED={live.SIM_SPEED}, one state folder, a session each",
        flush=True,
    )
    world = live.private_world("agy-bench-load-")
    with world as tmp, live.ProviderLog().installed() as log, cpu_hogs(args.hogs):
        asyncio.run(run(args.turns, tmp / "work", log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
