"""Benchmark: a turn that resumes a conversation with 12 earlier rows vs one with 10,000.

Goal (issue 8): the 10,000-row resume costs ≤ 1.5× the provider process's CPU and ≤ 1.5× the bind
latency of the 12-row one. Both conversations are written by `agy_provider.sim.bulk` into
agy-sim's state folder, so `agy-sim --conversation <id>` resumes them; each turn goes through
`stream_simple` with a session record that points at the conversation and its last row, so the
provider resumes it and only the new turn is streamed.

- CPU: `time.process_time()` of this process (all its threads; agy-sim's own CPU is not in it)
  from the call until the turn's session record is written.
- bind latency: from the call to the first event after `start` (the provider cannot stream before
  it has bound the conversation; spawning agy and agy's own start are in it, equally at both
  sizes). agy-sim alone resuming the same conversation is measured in the same rounds; its first
  text line against the turn's first text delta shows the provider's part (stream-json carries no
  thinking, so first text is the comparable moment).
Rounds alternate the sizes. Run: `.venv/bin/python benchmarks/bench_resume.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

from agy_provider.live.provider import history_digest
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import write_conversation
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore

SOURCES = ("sqlite", "rpc")
SIZES = (12, 10_000)
RATIO_GOAL = 1.5
TEXT_SIZE = 200


def last_index(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (idx,) = conn.execute("SELECT MAX(idx) FROM steps").fetchone()
    return int(idx)


async def resumed_turn(
    source: str, cid: str, db: Path, store: SessionStore, cwd: Path, log: live.ProviderLog
) -> tuple[live.TurnTiming, float, float, int]:
    """(timing, CPU seconds until the session is written, first bind log line or nan, rows before)."""
    session = f"resume-{source}-{cid}"
    rows = last_index(db) + 1
    store.put(
        session,
        SessionRecord(
            conversation_id=cid,
            last_step_index=rows - 1,
            event_source=source,
            history_digest=history_digest([]),
        ),
    )
    before = store.get(session)
    assert before is not None
    log.records.clear()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    timing = await live.timed_turn(source, session=session, store=store, cwd=cwd)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = store.get(session)
        if after is not None and after.updated_at != before.updated_at:
            break
        await asyncio.sleep(0.01)
    cpu = time.process_time() - cpu0
    bind_log = log.records[0][0] - t0 if log.records else float("nan")
    return timing, cpu, bind_log, rows


async def run(
    rounds: int, convs: dict[int, tuple[str, Path]], cwd: Path, log: live.ProviderLog
) -> None:
    store = SessionStore()
    for source in SOURCES:  # imports, plugins and agy's version, paid before anything is timed
        warm = await live.timed_turn(source, cwd=cwd)
        if not warm.ok:
            print(f"  warm-up {source} failed: {warm.error}")
    log.warnings_text()
    sim: dict[int, list[live.SimTiming]] = {n: [] for n in SIZES}
    turns: dict[tuple[str, int], list[tuple[live.TurnTiming, float, float, int]]] = {
        (s, n): [] for s in SOURCES for n in SIZES
    }
    for r in range(rounds):
        for n in SIZES if r % 2 == 0 else SIZES[::-1]:
            cid, db = convs[n]
            sim[n].append(await live.sim_alone(cwd=cwd, conversation=cid))
            for source in SOURCES:
                turns[(source, n)].append(await resumed_turn(source, cid, db, store, cwd, log))

    print(f"\n  {rounds} rounds; medians (best in brackets)")
    sim_text = {n: live.median([s.first_text for s in sim[n] if s.ok]) for n in SIZES}
    for n in SIZES:
        ok = [s for s in sim[n] if s.ok]
        print(
            f"  agy-sim alone, {n:>6} rows: first text line {sim_text[n] * 1000:7.1f} ms, "
            f"exit {live.median([s.end for s in ok]) * 1000:7.1f} ms  ({len(ok)}/{len(sim[n])} ok)"
        )
    verdicts = []
    for source in SOURCES:
        print(f"\n  {source}:")
        cpu: dict[int, float] = {}
        bind: dict[int, float] = {}
        text: dict[int, float] = {}
        for n in SIZES:
            results = turns[(source, n)]
            good = [r for r in results if r[0].ok]
            bad = [r for r in results if not r[0].ok]
            if not good:
                print(f"    {n:>6} rows: every turn failed: {bad[0][0].error if bad else '?'}")
                continue
            cpu[n] = live.median([r[1] for r in good])
            bind[n] = live.median([r[0].first_event for r in good])
            text[n] = live.median([r[0].first_text for r in good])
            logged = [r[2] for r in good if r[2] == r[2]]
            print(
                f"    {n:>6} rows (resumed after {min(r[3] for r in good)}–{max(r[3] for r in good)}): "
                f"CPU {cpu[n] * 1000:6.1f} ms [{min(r[1] for r in good) * 1000:.1f}]  "
                f"first event {bind[n] * 1000:6.1f} ms [{min(r[0].first_event for r in good) * 1000:.1f}]  "
                f"first text {text[n] * 1000:6.1f} ms ({(text[n] - sim_text[n]) * 1000:+.1f} vs agy-sim's)  "
                f"done {live.median([r[0].end for r in good]) * 1000:.0f} ms  "
                f"deltas {min(r[0].text_deltas for r in good)}–{max(r[0].text_deltas for r in good)}  "
                f"{len(good)}/{len(results)} ok"
                + (f"; bind logged at {live.median(logged) * 1000:.1f} ms" if logged else "")
                + (f"; failed: {bad[0][0].error[:200]}" if bad else "")
            )
        if log.warnings:
            print(log.warnings_text("    "))
        small, large = SIZES
        if small in cpu and large in cpu:
            cpu_ratio = cpu[large] / cpu[small]
            bind_ratio = bind[large] / bind[small]
            net_small = text[small] - sim_text[small]
            net_large = text[large] - sim_text[large]
            verdicts.append(
                f"  {source:>6}: CPU {cpu_ratio:5.2f}× ({cpu[small] * 1000:.0f} → {cpu[large] * 1000:.0f} ms) → "
                f"{'PASS' if cpu_ratio <= RATIO_GOAL else 'FAIL'};  bind latency (call → first event) "
                f"{bind_ratio:5.2f}× ({bind[small] * 1000:.0f} → {bind[large] * 1000:.0f} ms) → "
                f"{'PASS' if bind_ratio <= RATIO_GOAL else 'FAIL'};  first text behind agy-sim's "
                f"{net_small * 1000:+.0f} → {net_large * 1000:+.0f} ms"
            )
        else:
            verdicts.append(f"  {source:>6}: FAIL (turns failed; no ratio)")
    print(f"\ngoal: {SIZES[1]:,} rows ≤ {RATIO_GOAL}× the {SIZES[0]}-row resume")
    print("\n".join(verdicts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="rounds (each size once per round)")
    args = parser.parse_args()
    live.run_header("bench_resume: a resumed turn at 12 vs 10,000 earlier rows")
    print(f"  default scenario, AGY_SIM_SPEED={live.SIM_SPEED}; rows: sim.bulk.write_conversation")
    with live.private_world("agy-bench-resume-") as tmp:
        folder = tmp / "agy-state" / "conversations"
        convs: dict[int, tuple[str, Path]] = {}
        for n in SIZES:
            cid = str(uuid.uuid4())
            db = folder / f"{cid}.db"
            start = time.perf_counter()
            writer = write_conversation(db, cid, turns=n // STEPS_PER_TURN, text_size=TEXT_SIZE)
            writer.close(checkpoint=True)
            convs[n] = (cid, db)
            print(
                f"  wrote {n:>6} rows: {db.stat().st_size / 1e6:5.2f} MB in "
                f"{time.perf_counter() - start:.1f} s"
            )
        with live.ProviderLog().installed() as log:
            asyncio.run(run(args.rounds, convs, tmp / "work", log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
