"""Benchmark: CPU per delta of a 1 MB answer through the stream-json source, against the sqlite
source's in the same run (issue 18: "with the stream-json source the CPU per delta stays flat").

Each side is driven as the turn's pump drives it — poll, then the assembler's `feed` (what a turn
pays per delta: decoding, the Step snapshot, the assembler's growth check) — and CPU is measured
per delta (`time.process_time`, worker threads included). Flat means the last 10% of deltas cost
about what the first 10% did. Three deliveries for stream-json: a burst (agy writing faster than
we read: 64 KiB reads), one delta per poll as fast as the loop goes, and one delta per poll
paced 35 ms apart (slower than `FLUSH_EVERY`: every delta is snapshotted, the worst case); the
sqlite side rewrites one planner row per delta (agy-sim's real writer), the same deltas as the
paced case. Run: `.venv/bin/python benchmarks/bench_stdout_source.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agy_provider.plugins.sqlite_source import SqliteEventSource
from agy_provider.plugins.streamjson_source import FLUSH_EVERY
from agy_provider.plugins.streamjson_source import StreamJsonEventSource
from live_support import run_header

from agy_provider.agy.stdout import StdoutEvents
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.writer import ConversationWriter

CID = "0b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d"
GENERATING = "CORTEX_STEP_STATUS_GENERATING"
FLAT_GOAL = 1.5  # last 10% / first 10% of deltas: "flat"
READ_SIZE = 65536  # what the runner reads from agy's stdout at once


def delta_line(index: int, text: str) -> bytes:
    body = {
        "conversation_id": CID,
        "step_index": index,
        "state": "ACTIVE",
        "step_type": "agent_response",
        "text_delta": text,
    }
    return json.dumps({"event": "step_update", "step_update": body}, separators=(",", ":")).encode()


def chunks_for(total: int, size: int) -> list[str]:
    words = ("lorem ", "ipsum ", "dolor ", "sit ", "amet, ", "consectetur\n")
    text, n = [], 0
    while n < total:
        word = words[len(text) % len(words)]
        text.append(word)
        n += len(word)
    joined = "".join(text)[:total]
    return [joined[i : i + size] for i in range(0, total, size)]


def tenths(per_delta: list[float]) -> tuple[float, float]:
    k = max(1, len(per_delta) // 10)
    return statistics.mean(per_delta[:k]), statistics.mean(per_delta[-k:])


class Meter:
    """CPU of the poll and the assembler, charged to the deltas they consumed."""

    def __init__(self) -> None:
        self.assembler = StepAssembler(model="bench", turn_start=-1)
        self.per_delta: list[float] = []
        self.text = 0

    async def step(self, poll: Callable[[], Awaitable[list[Any]]], deltas: int) -> None:
        start = time.process_time()
        events = self.assembler.feed(await poll())
        spent = time.process_time() - start
        self.text += sum(len(getattr(e, "delta", "")) for e in events if e.type == "text_delta")
        self.per_delta += [spent / max(1, deltas)] * deltas


async def stream_json(chunks: list[str], mode: str, pace: float) -> Meter:
    events = StdoutEvents()
    events.feed(json.dumps({"event": "init", "conversation_id": CID}).encode() + b"\n")
    source = StreamJsonEventSource(events)
    await source.open()
    meter = Meter()
    lines = [delta_line(1, c) + b"\n" for c in chunks]
    if mode == "burst":
        blob = b"".join(lines)
        at = 0
        for start in range(0, len(blob), READ_SIZE):
            piece = blob[start : start + READ_SIZE]
            before = events.line_count
            t = time.process_time()
            events.feed(piece)  # the runner's read: charged to the deltas it completed
            spent = time.process_time() - t
            fed = events.line_count - before
            await meter.step(source.poll, fed)
            if fed:
                meter.per_delta[-fed:] = [v + spent / fed for v in meter.per_delta[-fed:]]
            at += fed
    else:
        for line in lines:
            t = time.process_time()
            events.feed(line)
            spent = time.process_time() - t
            await meter.step(source.poll, 1)
            meter.per_delta[-1] += spent
            if pace:
                await asyncio.sleep(pace)
    await meter.step(lambda: source.poll(force=True), 0)
    await source.aclose()
    return meter


async def sqlite(chunks: list[str], pace: float, folder: Path) -> Meter:
    db = folder / f"{CID}.db"
    writer = ConversationWriter(db, CID)
    idx = writer.append(planner_step(""))
    source = SqliteEventSource(db, min_index=-1)
    await source.open()
    meter = Meter()
    text = ""
    try:
        await meter.step(lambda: source.poll(force=True), 0)
        for chunk in chunks:
            text += chunk
            writer.update(idx, planner_step(text, status=GENERATING))
            await meter.step(lambda: source.poll(force=True), 1)
            if pace:
                await asyncio.sleep(pace)
    finally:
        await source.aclose()
        writer.close()
    return meter


def report(name: str, meter: Meter, total: int) -> float:
    first, last = tenths(meter.per_delta)
    ratio = last / first if first else float("inf")
    parts = [
        f"{len(meter.per_delta):>6} deltas:",
        f"first 10% {first * 1e6:8.1f} µs, last 10% {last * 1e6:8.1f} µs per delta",
        f"-> x{ratio:5.2f} ({'flat' if ratio <= FLAT_GOAL else 'grows'});",
        f"total CPU {sum(meter.per_delta) * 1000:8.1f} ms",
    ]
    if meter.text != total:
        parts.append(f"(streamed {meter.text} of {total} chars!)")
    print(f"  {name:<44}", *parts)
    return ratio


async def run(args: argparse.Namespace) -> None:
    run_header("bench_stdout_source: CPU per delta of a 1 MB answer, stream-json vs sqlite")
    total = args.size
    small = chunks_for(total, args.delta)
    large = chunks_for(total, args.paced_delta)
    print(
        f"\nanswer {total:,} chars; fast deltas of {args.delta} chars ({len(small):,}), paced "
        f"deltas of {args.paced_delta} chars ({len(large):,}) {args.pace * 1000:.0f} ms apart; "
        f"stream-json snapshots a long text at most every {FLUSH_EVERY * 1000:.0f} ms"
    )
    ratios: dict[str, float] = {}
    ratios["burst"] = report(
        "stream-json, burst (64 KiB reads)", await stream_json(small, "burst", 0.0), total
    )
    ratios["fast"] = report(
        "stream-json, one delta per poll, unpaced", await stream_json(small, "each", 0.0), total
    )
    ratios["paced"] = report(
        f"stream-json, one delta per poll, {args.pace * 1000:.0f} ms apart",
        await stream_json(large, "each", args.pace),
        total,
    )
    with tempfile.TemporaryDirectory(prefix="agy-bench-stdout-") as tmp:
        ratios["sqlite"] = report(
            f"sqlite, one commit per delta, {args.pace * 1000:.0f} ms apart",
            await sqlite(large, args.pace, Path(tmp)),
            total,
        )
    print("\nsummary")
    for name in ("burst", "fast"):
        verdict = "PASS" if ratios[name] <= FLAT_GOAL else "FAIL"
        print(
            f"  stream-json {name}: last/first x{ratios[name]:.2f} (goal <= {FLAT_GOAL}) -> {verdict}"
        )
    print(
        f"  paced (every delta snapshotted): stream-json x{ratios['paced']:.2f} vs sqlite "
        f"x{ratios['sqlite']:.2f} (the snapshot's copy of the text remains; see the figures)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1_000_000, help="answer size in characters")
    parser.add_argument("--delta", type=int, default=50, help="fast deltas' size")
    parser.add_argument("--paced-delta", type=int, default=5_000, help="paced deltas' size")
    parser.add_argument("--pace", type=float, default=0.035, help="seconds between paced deltas")
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
