"""Benchmark: a host's memory against the size of the shared session store (issue 29, item 8).

A fresh host process imports the provider, then runs its first turn against agy-sim with a
session id the store holds (planning looks its records up, settle saves the session and its
conversation), and reports its RSS after the import and after that turn (garbage collected,
the save landed). The store holds 1,000 or 10,000 records: sessions that hosts name
(`serve:<user>`, never pruned) and conversation records (`conv:<id>`, pruned past 2,000), so
10,000 records are 2,000 conversations and 8,000 named sessions, a store the code allows today.
Beside the turn, the same store work alone (the lookups and one save, no agy) isolates it, and
20 more rounds of it give its CPU per turn in a long-lived host.
Each is measured for this checkout and for a baseline tree (`git archive <ref>`, default `main`)
in the same run, interleaved. Goal: RSS after the first turn, 10 k / 1 k records ≤ 1.2×.

Run: `.venv/bin/python benchmarks/bench_session_store.py [--base-ref main] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

GOAL = 1.2
SESSION = "serve:user7"

# A host's first turn. argv: the session id, "turn" or "store".
CHILD = r"""
import asyncio, gc, json, os, sys
import psutil
from agy_provider import Context, Model, SimpleStreamOptions, UserMessage, stream_simple
from agy_provider.live.provider import wait_for_turns

me = psutil.Process()
gc.collect()
imported = me.memory_info().rss

async def turn():
    model = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
                  base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)
    context = Context(messages=[UserMessage(content="hi", timestamp=0)])
    outcome = "none"
    async for event in stream_simple(model, context, SimpleStreamOptions(session_id=sys.argv[1])):
        if event.type in ("done", "error"):
            outcome = event.type
    await wait_for_turns()  # the session saved, agy gone
    return outcome

def store_work():
    # What planning and settle do with the store, without agy.
    from agy_provider.store.sessions import SessionRecord, SessionStore
    store = SessionStore()
    record = store.all().get(sys.argv[1])
    store.all().get("conv:" + record.conversation_id)
    store.put_many({sys.argv[1]: record, "conv:" + record.conversation_id: record})
    return "done"

outcome = asyncio.run(turn()) if sys.argv[2] == "turn" else store_work()
gc.collect()
after = me.memory_info().rss
cpu = []
if sys.argv[2] == "store":  # then 20 more turns' store work: its CPU per turn, steady state
    import time
    for _ in range(20):
        started = time.process_time()
        store_work()
        cpu.append(time.process_time() - started)
print(json.dumps({"imported": imported, "after": after, "outcome": outcome,
                  "cpu": sorted(cpu)[len(cpu) // 2] if cpu else 0.0}))
"""


def write_store(path: Path, count: int) -> None:
    """`count` records in the store's own layout (identical for both sides)."""
    from agy_provider.store.sessions import MAX_CONVERSATION_RECORDS
    from agy_provider.store.sessions import SessionRecord
    from agy_provider.store.sessions import SessionStore

    conversations = min(count // 2, MAX_CONVERSATION_RECORDS)
    records = {}
    for n in range(count - conversations):
        records[f"serve:user{n}"] = SessionRecord(
            conversation_id=str(uuid.UUID(int=n)),
            last_step_index=40 + n % 50,
            event_source="sqlite",
            agy_version="1.22.2",
            history_digest=os.urandom(32).hex(),
        )
    for n in range(conversations):
        records[f"conv:{uuid.UUID(int=n)}"] = SessionRecord(
            conversation_id=str(uuid.UUID(int=n)),
            last_step_index=40 + n % 50,
            event_source="sqlite",
            agy_version="1.22.2",
            history_digest=os.urandom(32).hex(),
            mark=os.urandom(18).hex(),
            answered_mark=os.urandom(18).hex(),
            answered_digest=os.urandom(32).hex(),
        )
    SessionStore(path).put_many(records)


def baseline_tree(ref: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="agy-bench-store-base-"))
    archive = subprocess.run(
        ["git", "archive", ref], cwd=live.ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "agy_provider" / "plugins").symlink_to("../plugins")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=live.ROOT, capture_output=True, text=True
    ).stdout.strip()
    (folder / "COMMIT").write_text(commit + "\n")
    return folder


def run_child(code_path: Path | None, store: Path, kind: str, cwd: Path) -> dict[str, float]:
    env = dict(os.environ)
    env["AGY_PROVIDER_SESSIONS"] = str(store)
    env["AGY_WARM"] = "0"  # the host alone: no agy kept running after the turn
    if code_path is not None:
        env["PYTHONPATH"] = str(code_path)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, SESSION, kind],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=live.TURN_DEADLINE + 60,
        check=False,
    )
    try:
        out: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}") from None
    return out


def mib(n: float) -> str:
    return f"{n / 2**20:6.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    live.run_header("bench_session_store: host RSS against the session store's size")
    base = baseline_tree(args.base_ref)
    sides = {"this checkout": None, f"{args.base_ref} ({(base / 'COMMIT').read_text().strip()})": base}
    sizes = (1_000, 10_000)
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    with live.private_world("agy-bench-store-") as world:
        cwd = world / "work"
        stores = {}
        for size in sizes:
            stores[size] = world / f"sessions-{size}.json"
            write_store(stores[size], size)
            print(f"  store of {size:,} records: {stores[size].stat().st_size / 1024:,.0f} KiB")
        started = time.perf_counter()
        for _ in range(args.runs):
            for kind in ("store", "turn"):
                for side, code in sides.items():
                    for size in sizes:
                        copy = world / f"run-{size}.json"  # each run starts from the same file
                        shutil.copyfile(stores[size], copy)
                        out = run_child(code, copy, kind, cwd)
                        if out["outcome"] != "done":
                            print(f"  ! {side} {kind} {size}: the turn ended {out['outcome']}")
                        results.setdefault((side, kind, size), []).append(out)
        print(f"  {args.runs} runs of each, interleaved, in {time.perf_counter() - started:.0f} s")
    shutil.rmtree(base, ignore_errors=True)
    for kind, title in (
        ("store", "the store work alone (two lookups + one save; then its CPU per turn, median of 20)"),
        ("turn", "a first turn on agy-sim (AGY_WARM=0)"),
    ):
        print(f"\n{title}: median RSS in MiB of {args.runs} fresh host processes")
        cpu_head = f" {'CPU/turn':>9}" if kind == "store" else ""
        print(f"  {'code':<22} {'records':>8} {'imported':>9} {'after':>7} {'grew':>7}{cpu_head}")
        for side in sides:
            after = {}
            for size in sizes:
                runs = results[(side, kind, size)]
                imported = live.median([r["imported"] for r in runs])
                after[size] = live.median([r["after"] for r in runs])
                print(
                    f"  {side:<22} {size:>8,} {mib(imported):>9} {mib(after[size]):>7} "
                    f"{mib(after[size] - imported):>7}"
                    + (
                        f" {live.median([r['cpu'] for r in runs]) * 1000:6.1f} ms"
                        if kind == "store"
                        else ""
                    )
                )
            ratio = after[10_000] / after[1_000]
            verdict = "meets" if ratio <= GOAL else "misses"
            print(f"  {side:<22} 10k / 1k after: {ratio:.2f}x ({verdict} the goal of ≤ {GOAL}x)")


if __name__ == "__main__":
    main()
