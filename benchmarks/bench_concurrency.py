"""Benchmark: 1, 5 and 20 concurrent turns in one process and one event loop, per event source.

For each: did every turn finish with `done`, how many text deltas each streamed before it (goal
≥ 2 each), whether each bound a conversation of its own (identical prompts, one state folder),
and the event loop's lag: a coroutine sleeps 5 ms in a loop and records how late it wakes (goal
p99 ≤ 20 ms). Baseline in the same run: the same probe while the same number of bare agy-sim
subprocesses run (stream-json read to exit) and no provider.
Run: `.venv/bin/python benchmarks/bench_concurrency.py [--sizes 1,5,20]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

SOURCES = ("sqlite", "rpc")
LAG_P99_GOAL_MS = 20.0
DELTAS_GOAL = 2


def lag_text(probe: live.LagProbe) -> str:
    p50, p99, worst = probe.summary()
    return (
        f"lag p50 {p50:5.2f} ms  p99 {p99:6.2f} ms  max {worst:6.1f} ms ({len(probe.lags)} wakes)"
    )


async def bare_sims(n: int, cwd: Path) -> tuple[live.LagProbe, int, float]:
    probe = live.LagProbe()
    probe.start()
    started = time.perf_counter()
    runs = await asyncio.gather(*(live.sim_alone(cwd=cwd) for _ in range(n)))
    wall = time.perf_counter() - started
    await probe.stop()
    return probe, sum(r.ok for r in runs), wall


async def provider_turns(
    n: int, source: str, cwd: Path, tag: str
) -> tuple[live.LagProbe, list[live.TurnTiming], float, int]:
    """`n` turns at once, each with its own session; returns how many conversations they bound."""
    from agy_provider.store.sessions import SessionStore

    store = SessionStore()
    sessions = [f"{tag}-{source}-{n}-{k}" for k in range(n)]
    probe = live.LagProbe()
    probe.start()
    started = time.perf_counter()
    turns = await asyncio.gather(
        *(live.timed_turn(source, cwd=cwd, session=s, store=store) for s in sessions)
    )
    wall = time.perf_counter() - started
    await probe.stop()
    # The session is written after `done` reaches the caller (the final event is not held back
    # for the store's fsync), so give the turns a moment to record what they bound.
    deadline = time.monotonic() + 10
    while True:
        records = store.all()
        if all(s in records for s in sessions) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    bound = {records[s].conversation_id for s in sessions if s in records}
    return probe, list(turns), wall, len(bound)


async def run(sizes: list[int], cwd: Path, log: live.ProviderLog) -> list[str]:
    verdicts: list[str] = []
    # Every process spawned later pays for these once: imports, plugins, agy's version.
    for source in SOURCES:
        await live.timed_turn(source, cwd=cwd)
    log.warnings_text()
    for n in sizes:
        print(f"\n{n} concurrent turn{'s' if n > 1 else ''}:")
        probe, ok, wall = await bare_sims(n, cwd)
        print(
            f"  {'bare agy-sim (baseline)':<24} {ok}/{n} exited 0 in {wall:5.1f} s   {lag_text(probe)}"
        )
        for source in SOURCES:
            probe, turns, wall, bound = await provider_turns(n, source, cwd, f"r{time.time_ns()}")
            done = sum(t.ok for t in turns)
            deltas = [t.text_deltas for t in turns if t.ok]
            streamed = sum(d >= DELTAS_GOAL for d in deltas)
            errors = sorted({t.error for t in turns if not t.ok})
            print(
                f"  {source + ' turns':<24} {done}/{n} done in {wall:5.1f} s   {lag_text(probe)}\n"
                f"  {'':<24} text deltas before done: {min(deltas, default=0)}–{max(deltas, default=0)} "
                f"({streamed}/{n} turns with ≥ {DELTAS_GOAL}); distinct conversations bound: "
                f"{bound} of {n}"
            )
            for error in errors[:3]:
                print(f"  {'':<24} error: {error[:300]}")
            if log.warnings:
                print(log.warnings_text(" " * 27))
            p99 = probe.summary()[1]
            verdicts.append(
                f"  {source:>6} × {n:<2}  all done: {'PASS' if done == n else 'FAIL'} ({done}/{n});  "
                f"≥ {DELTAS_GOAL} text deltas each: {'PASS' if streamed == n else 'FAIL'} ({streamed}/{n});  "
                f"lag p99 ≤ {LAG_P99_GOAL_MS:.0f} ms: {'PASS' if p99 <= LAG_P99_GOAL_MS else 'FAIL'} "
                f"({p99:.2f} ms);  a conversation of its own each: {'PASS' if bound == n else 'FAIL'} "
                f"({bound} distinct in {n} session records)"
            )
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1,5,20", help="comma-separated numbers of turns")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    live.run_header("bench_concurrency: concurrent turns in one event loop vs bare agy-sim")
    print(
        f"  default scenario, AGY_SIM_SPEED={live.SIM_SPEED}, identical prompt {live.PROMPT!r}, "
        "one state folder; lag probe: asyncio.sleep(5 ms) in a loop"
    )
    with live.private_world("agy-bench-concurrency-") as tmp, live.ProviderLog().installed() as log:
        verdicts = asyncio.run(run(sizes, tmp / "work", log))
    print("\ngoals:")
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
