"""Benchmark: one turn through `stream_simple` against agy-sim, cold and warm, per event source.

Baseline in the same run: agy-sim alone (`agy-sim -p hi --output-format stream-json`, spawn to
exit). The provider's overhead = turn time − agy-sim alone. Cold = the first turn of a fresh
Python process, counted from just before `from agy_provider import …` (imports, plugin loading,
`agy --version`); warm = later turns in this process. Rounds interleave the three commands so
each sees the same load. Run: `.venv/bin/python benchmarks/bench_turn.py [--cold N] [--warm N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

SOURCES = ("sqlite", "rpc")

# The cold turn: a fresh interpreter whose clock starts before the provider is imported.
COLD_CHILD = r"""
import time
t0 = time.perf_counter()
import asyncio, json, sys
from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple
imported = time.perf_counter() - t0

async def turn():
    out = {"import": imported, "first_event": None, "end": None, "deltas": 0, "ok": False, "error": ""}
    model = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
                  base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
    stream = stream_simple(model, Context(messages=[UserMessage(content=sys.argv[2], timestamp=0)]),
                           SimpleStreamOptions(), event_source=sys.argv[1])
    async for event in stream:
        now = time.perf_counter() - t0
        if event.type == "start":
            out["start"] = now
            continue
        if out["first_event"] is None:
            out["first_event"] = now
        if event.type == "text_delta":
            out["deltas"] += 1
        elif event.type in ("done", "error"):
            out["end"] = now
            out["ok"] = event.type == "done"
            if event.type == "error":
                out["error"] = event.error.error_message or event.reason
    return out

print(json.dumps(asyncio.run(turn())))
"""


def cold_turn(source: str, cwd: Path) -> dict[str, float | bool | str | None]:
    """One cold turn in a fresh interpreter; its own figures plus the wall time of the process.

    Output goes to files, not pipes, so a stray grandchild holding them cannot hang the run; a
    child that overstays the deadline is ended with its whole tree and counted as failed.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", COLD_CHILD, source, live.PROMPT],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        try:
            proc.wait(timeout=live.TURN_DEADLINE + 30)
        except subprocess.TimeoutExpired:
            live.end_tree(proc.pid)
            proc.wait()
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        lines = out.read().strip().splitlines()
        try:
            result: dict[str, float | bool | str | None] = json.loads(lines[-1])
        except (ValueError, IndexError):
            tail = err.read().strip()[-500:]
            result = {"ok": False, "error": f"child failed ({proc.returncode}): {tail}"}
    result["process"] = wall
    return result


def show(label: str, values: list[float], baseline: list[float]) -> str:
    """Median and best, and the overhead over agy-sim alone both ways (best−best is the figure
    least disturbed by whatever else the machine runs)."""
    med, best = live.median(values), min(values)
    return (
        f"  {label:<28} median {med * 1000:7.1f} ms  best {best * 1000:7.1f} ms  overhead over "
        f"agy-sim alone: median {(med - live.median(baseline)) * 1000:+7.1f} ms, "
        f"best {(best - min(baseline)) * 1000:+7.1f} ms"
    )


async def warm_rounds(rounds: int, cwd: Path) -> None:
    print(
        f"\nwarm: later turns in this process, {rounds} interleaved rounds (after one warm-up each)"
    )
    for source in SOURCES:  # warm-up: imports, plugins, agy's version cache
        warm = await live.timed_turn(source, cwd=cwd)
        if not warm.ok:
            print(f"  warm-up {source} failed: {warm.error}")
    sim: list[float] = []
    sim_first_text: list[float] = []
    turns: dict[str, list[live.TurnTiming]] = {s: [] for s in SOURCES}
    for _ in range(rounds):
        alone = await live.sim_alone(cwd=cwd)
        if alone.ok:
            sim.append(alone.end)
            sim_first_text.append(alone.first_text)
        for source in SOURCES:
            turns[source].append(await live.timed_turn(source, cwd=cwd))
    base = live.median(sim)
    base_text = live.median(sim_first_text)
    print(
        f"  {'agy-sim alone (spawn→exit)':<28} median {base * 1000:7.1f} ms  "
        f"best {min(sim) * 1000:7.1f} ms  first text line {base_text * 1000:.1f} ms  "
        f"({len(sim)}/{rounds} ok)"
    )
    for source in SOURCES:
        good = [t for t in turns[source] if t.ok]
        bad = [t for t in turns[source] if not t.ok]
        if not good:
            print(f"  {source}: every turn failed: {bad[0].error if bad else '?'}")
            continue
        print(show(f"{source} turn (call→done)", [t.end for t in good], sim))
        first_text = live.median([t.first_text for t in good])
        print(
            f"  {'':<28} first text {first_text * 1000:.1f} ms "
            f"({(first_text - base_text) * 1000:+.1f} ms vs agy-sim's first text line), "
            f"text deltas per turn {min(t.text_deltas for t in good)}–"
            f"{max(t.text_deltas for t in good)}, CPU in this process "
            f"{live.median([t.cpu for t in good]) * 1000:.0f} ms/turn, "
            f"{len(good)}/{len(turns[source])} ok" + (f"; failed: {bad[0].error}" if bad else "")
        )


def cold_rounds(rounds: int, cwd: Path) -> None:
    print(f"\ncold: first turn in a fresh Python process, {rounds} interleaved rounds")
    sim: list[float] = []
    turns: dict[str, list[dict[str, float | bool | str | None]]] = {s: [] for s in SOURCES}
    for _ in range(rounds):
        alone = asyncio.run(live.sim_alone(cwd=cwd))
        if alone.ok:
            sim.append(alone.end)
        for source in SOURCES:
            turns[source].append(cold_turn(source, cwd))
    base = live.median(sim)
    print(
        f"  {'agy-sim alone (spawn→exit)':<28} median {base * 1000:7.1f} ms  "
        f"best {min(sim) * 1000:7.1f} ms  ({len(sim)}/{rounds} ok)"
    )
    for source in SOURCES:
        good = [t for t in turns[source] if t.get("ok")]
        bad = [t for t in turns[source] if not t.get("ok")]
        if not good:
            print(f"  {source}: every cold turn failed: {bad[0].get('error') if bad else '?'}")
            continue
        ends = [float(t["end"] or 0) for t in good]
        print(show(f"{source} import+turn", ends, sim))
        print(
            f"  {'':<28} of which import {live.median([float(t['import'] or 0) for t in good]) * 1000:.1f} ms; "
            f"whole process (interpreter start to exit) "
            f"{live.median([float(t['process'] or 0) for t in good]) * 1000:.1f} ms; "
            f"text deltas {min(int(t['deltas'] or 0) for t in good)}–"
            f"{max(int(t['deltas'] or 0) for t in good)}; {len(good)}/{len(turns[source])} ok"
            + (f"; failed: {bad[0].get('error')}" if bad else "")
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", type=int, default=4, help="cold rounds (fresh processes)")
    parser.add_argument("--warm", type=int, default=8, help="warm rounds in this process")
    args = parser.parse_args()
    live.run_header("bench_turn: one turn through stream_simple vs agy-sim alone")
    print(
        f"  agy-sim {live.agy_sim()}, default scenario, AGY_SIM_SPEED={live.SIM_SPEED}, prompt {live.PROMPT!r}"
    )
    with live.private_world("agy-bench-turn-") as tmp:
        cwd = tmp / "work"
        cold_rounds(args.cold, cwd)
        with live.ProviderLog().installed() as log:
            asyncio.run(warm_rounds(args.warm, cwd))
        if log.warnings:
            print(log.warnings_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
