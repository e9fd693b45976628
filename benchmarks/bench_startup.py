"""Benchmark: what starting costs. `import agy_provider` against a bare interpreter, and a
process's first `stream_simple` against its second.

1. Import: best wall time of N fresh interpreters each for `python -c pass` (the baseline),
   `import agy_provider`, what a host imports to make a turn (`from agy_provider import
   stream_simple, …`) and `import agy_provider.sync` (goal for all three: ≤ 50 ms above the
   baseline), and the CLI module, shown beside them. The children read bytecode from a private
   cache written by one uncounted run of each (an installed package has its bytecode).
   `-X importtime` names the heaviest modules under the host's line and under the sync API
   (it does not see the names the package root loads through `importlib.import_module`).
2. First call: a fresh process imports the provider (not timed), then runs two turns against
   agy-sim; for each, the time from the call to `start` (plugins load, config, the turn's set-up)
   and to the first event after `start`. First − second = what only the first call pays.
Run: `.venv/bin/python benchmarks/bench_startup.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

IMPORT_GOAL_MS = 50.0
IMPORTS = {
    "bare": "pass",
    "package": "import agy_provider",
    "host": "from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple",
    "sync": "import agy_provider.sync",
    "cli": "import agy_provider.cli",
}

# Two turns in one fresh process; times from each call, in seconds.
FIRST_CALL_CHILD = r"""
import asyncio, json, sys, time
from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple

async def turn():
    model = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
                  base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
    t0 = time.perf_counter()
    stream = stream_simple(model, Context(messages=[UserMessage(content="hi", timestamp=0)]),
                           SimpleStreamOptions(), event_source=sys.argv[1])
    returned = time.perf_counter() - t0
    out = {"returned": returned, "start": None, "first": None, "end": None, "ok": False}
    async for event in stream:
        now = time.perf_counter() - t0
        if event.type == "start":
            out["start"] = now
        elif out["first"] is None:
            out["first"] = now
        if event.type in ("done", "error"):
            out["end"] = now
            out["ok"] = event.type == "done"
    return out

async def main():
    return [await turn(), await turn()]

print(json.dumps(asyncio.run(main())))
"""


# Children run in an empty folder: `python -c` puts its cwd first on sys.path, and a checkout there
# would shadow the code on PYTHONPATH (how the README measures an older commit).
NEUTRAL = tempfile.mkdtemp(prefix="agy-bench-startup-cwd-")
# Their bytecode: a private prefix, written by an uncounted first run. Without it (a checkout with
# no caches, PYTHONDONTWRITEBYTECODE set as on this machine) every child compiles what it imports
# and the figure is the compiler's, not the import's. Nothing in the checkout is written.
IMPORT_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPYCACHEPREFIX": str(Path(NEUTRAL) / "pycache"),
}


def one_child(code: str) -> tuple[float, float]:
    """A fresh interpreter running `code`: its wall time and its CPU time (user + system), in s.
    The CPU time moves less than the wall time when other work shares the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=NEUTRAL, env=IMPORT_ENV)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_costs(runs: int) -> dict[str, float]:
    """Each import's best wall time above the best bare interpreter's, in ms."""
    print(f"\nimport: best of {runs} fresh interpreters each (rounds interleave the commands)")
    for code in IMPORTS.values():
        one_child(code)  # writes the bytecode cache; not counted
    walls: dict[str, list[float]] = {name: [] for name in IMPORTS}
    cpus: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for _ in range(runs):
        for name, code in IMPORTS.items():
            wall, cpu = one_child(code)
            walls[name].append(wall)
            cpus[name].append(cpu)
    bare, bare_cpu = min(walls["bare"]), min(cpus["bare"])
    for name, code in IMPORTS.items():
        best, cpu = min(walls[name]), min(cpus[name])
        extra = (
            ""
            if name == "bare"
            else f"  {(best - bare) * 1000:+6.1f} ms above bare (CPU {(cpu - bare_cpu) * 1000:+6.1f})"
        )
        print(
            f"  {name:<8} {best * 1000:6.1f} ms (median {live.median(walls[name]) * 1000:6.1f}, "
            f"CPU {cpu * 1000:5.1f}){extra}  `{code}`"
        )
    for name, label in (("host", "the host's line"), ("sync", "`import agy_provider.sync`")):
        heaviest = importtime(IMPORTS[name])
        if heaviest:
            print(f"  heaviest under {label} (-X importtime, cumulative, one run):")
            for us, module in heaviest:
                print(f"    {us / 1000:6.1f} ms  {module}")
    return {name: (min(walls[name]) - bare) * 1000 for name in IMPORTS if name != "bare"}


def importtime(code: str, top: int = 8) -> list[tuple[int, str]]:
    """The modules with the largest cumulative import time whose parent is not also listed."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=NEUTRAL,
        env=IMPORT_ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    rows: list[tuple[int, int, str]] = []
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            rows.append((int(match.group(2)), len(match.group(3)), match.group(4)))
    # Top-level entries (depth 1) of the import tree are what the host's line pulled in directly.
    top_level = sorted(((cum, name) for cum, depth, name in rows if depth <= 2), reverse=True)
    return top_level[:top]


def first_call(runs: int, cwd: Path) -> None:
    print(
        f"\nfirst call: two turns in each of {runs} fresh processes (sqlite source), "
        "times from the call"
    )
    pairs = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-c", FIRST_CALL_CHILD, "sqlite"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=2 * live.TURN_DEADLINE + 30,
            check=False,
        )
        try:
            pairs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            print(f"  a child failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    good = [p for p in pairs if p[0]["ok"] and p[1]["ok"]]
    if not good:
        print("  no process finished both turns")
        return
    for label, key in (
        ("stream_simple returned", "returned"),
        ("`start` reached the caller", "start"),
        ("first event after `start`", "first"),
        ("done", "end"),
    ):
        first = live.median([p[0][key] for p in good])
        second = live.median([p[1][key] for p in good])
        print(
            f"  {label:<28} 1st call {first * 1000:7.1f} ms   2nd call {second * 1000:7.1f} ms   "
            f"first-call cost {(first - second) * 1000:+7.1f} ms"
        )
    print(f"  ({len(good)}/{len(pairs)} processes finished both turns; medians)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per import")
    parser.add_argument("--calls", type=int, default=5, help="fresh processes for the first call")
    args = parser.parse_args()
    live.run_header("bench_startup: import and first-call cost")
    try:
        above = import_costs(args.runs)
    finally:
        shutil.rmtree(NEUTRAL, ignore_errors=True)
    with live.private_world("agy-bench-startup-") as tmp:
        first_call(args.calls, tmp / "work")
    print(
        f"\ngoals: each ≤ {IMPORT_GOAL_MS:.0f} ms above a bare interpreter (best of each, this run)"
    )
    for name, label in (
        ("package", "`import agy_provider`"),
        ("host", "the host's import line"),
        ("sync", "`import agy_provider.sync`"),
    ):
        verdict = "PASS" if above[name] <= IMPORT_GOAL_MS else "FAIL"
        print(f"  {label:<28} {above[name]:+6.1f} ms → {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
