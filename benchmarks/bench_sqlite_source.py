"""Benchmark: the sqlite event source's commit→event latency, idle CPU and tick cost (issue 4).

Three readers against the same seeded writer schedule, idle CPU against a naive 5 ms poller, and
one tick's cost in a 10,000-row vs a 12-row conversation. Run:
`.venv/bin/python benchmarks/bench_sqlite_source.py` (the script is its own writer with `--writer`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agy_provider.plugins import sqlite_source
from agy_provider.plugins.sqlite_source import SqliteEventSource

from agy_provider.agy.rows import decode_step_row
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.bulk import write_conversation
from agy_provider.sim.writer import ConversationWriter

P50_GOAL_MS, P99_GOAL_MS = 10.0, 30.0
CPU_GOAL_PERCENT = 0.5
TICK_GOAL_RATIO = 2.0
GENERATING, DONE = "CORTEX_STEP_STATUS_GENERATING", "CORTEX_STEP_STATUS_DONE"
PREFIX = "streaming answer"


# -- the writer (a separate process) ------------------------------------------------------------


def writer_main(db: str, seed: int, commits: int, burst: int, hold: float) -> None:
    """Append a planner placeholder, say `ready`, wait for `go`, then rewrite it `commits` times.

    Each commit appends `|k:time.time()` to the text, so the reader can tell when every commit
    happened. Intervals are 20–80 ms from `seed`. `burst` > 0 instead writes that many commits
    10 ms apart and then holds the database open, committing nothing, for `hold` seconds.
    """
    writer = ConversationWriter(db, "bench-sqlite-source")
    idx = writer.append(planner_step(""))
    print("ready", flush=True)
    sys.stdin.readline()
    rng = random.Random(seed)
    text = PREFIX
    count = burst or commits
    for k in range(count):
        time.sleep(0.01 if burst else rng.uniform(0.020, 0.080))
        text += f"|{k}:{time.time():.6f}"
        status = DONE if k == count - 1 and not burst else GENERATING
        writer.update(idx, planner_step(text, "", status=status))
    if burst:
        print("idle", flush=True)
        time.sleep(hold)
    writer.close()


class WriterProcess:
    def __init__(self, db: Path, seed: int, commits: int, burst: int = 0, hold: float = 0.0):
        argv = [
            sys.executable,
            __file__,
            "--writer",
            str(db),
            str(seed),
            str(commits),
            str(burst),
            str(hold),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the writer did not start")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait_line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def finish(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the source, whichever shape its poll has ------------------------------------------------------


async def polled(source: Any, *, force: bool = False) -> list[Any]:
    """`source.poll()`: a coroutine since issue 8 (the read runs in a worker thread), a plain
    call before; the benchmark drives either."""
    result = source.poll(force=force)
    return list(await result if inspect.isawaitable(result) else result)


async def closed(source: Any) -> None:
    if hasattr(source, "aclose"):
        await source.aclose()
    else:
        source.close()


def notifications() -> str:
    """What the source wakes on: inotify (in `agy_provider.live.fswatch` since issue 8) or ticks."""
    try:
        from agy_provider.live import fswatch

        available = fswatch.inotify_simple is not None
    except ImportError:
        available = getattr(sqlite_source, "inotify_simple", None) is not None
    return "inotify" if available else "no inotify (ticks only)"


# -- latency ------------------------------------------------------------------------------------


class Latencies:
    """commit k -> first moment a reader had a snapshot containing it (seconds)."""

    def __init__(self, commits: int) -> None:
        self.commits = commits
        self.seen: dict[int, float] = {}
        self.reads = 0

    def observe(self, text: str, now: float) -> None:
        self.reads += 1
        for part in text.split("|")[1:]:
            k, _, stamp = part.partition(":")
            key = int(k)
            if key not in self.seen:
                self.seen[key] = now - float(stamp)

    @property
    def complete(self) -> bool:
        return len(self.seen) >= self.commits


async def read_ours(
    db: Path,
    idx: int,
    writer: WriterProcess,
    lat: Latencies,
    source_class: type[SqliteEventSource] = SqliteEventSource,
) -> None:
    """Driven as the provider drives it: poll(), then wait(1.0), until agy is done."""
    source = source_class(db, min_index=-1)
    await source.open()
    try:
        await polled(source)
        writer.go()
        deadline = time.monotonic() + 60
        while not lat.complete and time.monotonic() < deadline:
            changed = await polled(source)
            now = time.time()
            for step in changed:
                if step.index == idx:
                    lat.observe(step.text, now)
            if lat.complete:
                break
            await source.wait(1.0)
    finally:
        await closed(source)


def naive_reader(
    interval: float,
) -> Callable[[Path, int, WriterProcess, Latencies], Awaitable[None]]:
    async def read(db: Path, idx: int, writer: WriterProcess, lat: Latencies) -> None:
        """Poll `PRAGMA data_version` every `interval` s; re-read and decode the row when it moved."""
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            writer.go()
            deadline = time.monotonic() + 60
            while not lat.complete and time.monotonic() < deadline:
                now_version = conn.execute("PRAGMA data_version").fetchone()[0]
                if now_version != version:
                    version = now_version
                    row = conn.execute(
                        "SELECT step_type, status, step_payload FROM steps WHERE idx = ?", (idx,)
                    ).fetchone()
                    step = decode_step_row(idx, row[0], row[1], row[2])
                    lat.observe(step.text, time.time())
                    continue
                await asyncio.sleep(interval)

    return read


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


async def bench_latency(tmp: Path, commits: int, seed: int) -> dict[str, list[float]]:
    readers: dict[str, Callable[[Path, int, WriterProcess, Latencies], Awaitable[None]]] = {
        "ours (SqliteEventSource)": read_ours,
        "naive 5 ms data_version": naive_reader(0.005),
        "fixed 250 ms (the TS poller)": naive_reader(0.25),
    }
    print(
        f"\n[1] commit -> event latency: a writer process rewrites one planner row {commits} times, "
        f"20-80 ms apart (seed {seed}); readers run one after another, each on a fresh writer run "
        "of the same schedule. Latency of commit k = first time the reader holds a snapshot with "
        "commit k's text (coalesced commits count from their own commit time)."
    )
    results: dict[str, list[float]] = {}
    for n, (name, read) in enumerate(readers.items()):
        db = tmp / f"latency-{n}.db"
        writer = WriterProcess(db, seed, commits)
        lat = Latencies(commits)
        try:
            start_cpu, start = time.process_time(), time.monotonic()
            await read(db, 0, writer, lat)
            cpu, elapsed = time.process_time() - start_cpu, time.monotonic() - start
        finally:
            writer.finish()
        values = [lat.seen[k] * 1000 for k in sorted(lat.seen)]
        results[name] = values
        print(
            f"  {name:<30} commits seen {len(values)}/{commits}, reads with the row {lat.reads:>3}: "
            f"p50 {percentile(values, 50):6.2f}  p90 {percentile(values, 90):6.2f}  "
            f"p99 {percentile(values, 99):6.2f}  max {max(values):6.2f} ms; "
            f"reader CPU {cpu / elapsed * 100:.1f}% of one core while commits flow"
        )
    return results


# -- idle CPU -----------------------------------------------------------------------------------


async def cpu_ours(
    db: Path,
    writer: WriterProcess,
    seconds: float,
    source_class: type[SqliteEventSource] = SqliteEventSource,
) -> tuple[float, int]:
    source = source_class(db, min_index=-1)
    await source.open()
    polls = 0
    try:
        await polled(source)
        writer.go()
        # The burst: follow it until the writer says it has gone idle, then let the loop back off.
        loop = asyncio.get_running_loop()
        idle = loop.run_in_executor(None, writer.wait_line)
        while not idle.done():
            await polled(source)
            await source.wait(1.0)
        await polled(source)
        start_cpu, end = time.process_time(), time.monotonic() + seconds
        while time.monotonic() < end:
            await polled(source)
            polls += 1
            await source.wait(min(1.0, max(0.0, end - time.monotonic())))
        return time.process_time() - start_cpu, polls
    finally:
        await closed(source)


async def cpu_naive(db: Path, writer: WriterProcess, seconds: float) -> tuple[float, int]:
    polls = 0
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        conn.execute("PRAGMA data_version").fetchone()
        writer.go()
        loop = asyncio.get_running_loop()
        idle = loop.run_in_executor(None, writer.wait_line)
        while not idle.done():
            conn.execute("PRAGMA data_version").fetchone()
            await asyncio.sleep(0.005)
        start_cpu, end = time.process_time(), time.monotonic() + seconds
        while time.monotonic() < end:
            conn.execute("PRAGMA data_version").fetchone()
            polls += 1
            await asyncio.sleep(0.005)
        return time.process_time() - start_cpu, polls


async def bench_idle_cpu(tmp: Path, seconds: float) -> dict[str, float]:
    print(
        f"\n[2] CPU while agy thinks without committing: writer makes 20 commits 10 ms apart, then "
        f"holds the database open with no commits; we measure our process's CPU time over {seconds:.0f} s "
        "of the reader loop (time.process_time: the whole process, event loop included)."
    )
    notify = notifications()
    print(
        f"  ours wakes on: {notify}; fallback ticks {sqlite_source.TICK_ACTIVE * 1000:.0f} ms "
        f"doubling to {sqlite_source.TICK_IDLE * 1000:.0f} ms"
    )
    out: dict[str, float] = {}
    for n, (name, run) in enumerate(
        (("ours (SqliteEventSource)", cpu_ours), ("naive 5 ms data_version", cpu_naive))
    ):
        db = tmp / f"idle-{n}.db"
        writer = WriterProcess(db, 0, 0, burst=20, hold=seconds + 5)
        try:
            cpu, polls = await run(db, writer, seconds)
        finally:
            writer.proc.kill()
            writer.finish()
        percent = cpu / seconds * 100
        out[name] = percent
        print(
            f"  {name:<30} {cpu * 1000:7.1f} ms CPU in {seconds:.0f} s = {percent:5.2f}% of one core ({polls} polls)"
        )
    return out


# -- tick cost ----------------------------------------------------------------------------------


async def bench_tick(tmp: Path, ticks: int) -> dict[int, float]:
    print(
        f"\n[3] one tick after one changed row: update the trailing planner row in place (status "
        f"GENERATING, text growing), then time only the poll (its read runs in a worker thread since "
        f"issue 8); {ticks} ticks per size, "
        "interleaved between the two sizes."
    )
    setups = []
    for turns in (3, 2500):
        db = tmp / f"tick-{turns}.db"
        writer = write_conversation(db, f"bench-tick-{turns}", turns=turns, text_size=600)
        idx = writer.append(planner_step(""))
        source = SqliteEventSource(db, min_index=-1)
        await source.open()
        await polled(source)
        setups.append((writer.step_count, writer, idx, source))
    timings: dict[int, list[float]] = {rows: [] for rows, *_ in setups}
    reads: dict[int, set[tuple[int, int]]] = {rows: set() for rows, *_ in setups}
    text = PREFIX
    try:
        for i in range(ticks):
            text += f" word{i}"
            for rows, writer, idx, source in setups:
                writer.update(idx, planner_step(text, "", status=GENERATING))
                start = time.perf_counter()
                changed = await polled(source)
                timings[rows].append(time.perf_counter() - start)
                if len(changed) != 1 or changed[0].text != text:
                    raise SystemExit(f"{rows} rows: tick {i} returned {changed!r}")
                reads[rows].add(source.last_read)
    finally:
        for _rows, writer, _idx, source in setups:
            await closed(source)
            writer.close()
    medians: dict[int, float] = {}
    for rows, values in timings.items():
        medians[rows] = statistics.median(values)
        print(
            f"  {rows:>6} rows: median {medians[rows] * 1e6:7.1f} µs, p90 {percentile(values, 90) * 1e6:7.1f} µs, "
            f"min {min(values) * 1e6:7.1f} µs; last_read (rows scanned, payloads fetched) = "
            f"{sorted(reads[rows])}"
        )
    return medians


# -- main ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    print("bench_sqlite_source: the sqlite event source (issue 4)")
    with tempfile.TemporaryDirectory(prefix="agy-bench-sqlite-") as tmp_name:
        tmp = Path(tmp_name)
        latency = await bench_latency(tmp, args.commits, args.seed)
        cpu = await bench_idle_cpu(tmp, args.idle_seconds)
        ticks = await bench_tick(tmp, args.ticks)

    ours, naive, fixed = list(latency.values())[:3]
    print("\nsummary")
    p50, p99 = percentile(ours, 50), percentile(ours, 99)
    print(
        f"  latency ours p50 {p50:.2f} ms (goal <= {P50_GOAL_MS:.0f}) -> {'PASS' if p50 <= P50_GOAL_MS else 'FAIL'}; "
        f"p99 {p99:.2f} ms (goal <= {P99_GOAL_MS:.0f}) -> {'PASS' if p99 <= P99_GOAL_MS else 'FAIL'}"
    )
    for label, other in (("fixed 250 ms", fixed), ("naive 5 ms", naive)):
        o50, o99 = percentile(other, 50), percentile(other, 99)
        print(
            f"  ours vs {label}: p50 {p50:.2f} vs {o50:.2f} ms (ours/{label} = {p50 / o50:.2f}x), "
            f"p99 {p99:.2f} vs {o99:.2f} ms (ours/{label} = {p99 / o99:.2f}x)"
        )
    ours_cpu, naive_cpu = cpu.values()
    print(
        f"  idle CPU ours {ours_cpu:.3f}% of one core (goal <= {CPU_GOAL_PERCENT}%) -> "
        f"{'PASS' if ours_cpu <= CPU_GOAL_PERCENT else 'FAIL'}; naive 5 ms poller {naive_cpu:.3f}%"
    )
    small, large = min(ticks), max(ticks)
    ratio = ticks[large] / ticks[small]
    print(
        f"  tick cost {large} rows / {small} rows: {ratio:.2f}x (goal <= {TICK_GOAL_RATIO:.0f}x) -> "
        f"{'PASS' if ratio <= TICK_GOAL_RATIO else 'FAIL'}"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        db, seed, commits, burst, hold = sys.argv[2:7]
        writer_main(db, int(seed), int(commits), int(burst), float(hold))
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--ticks", type=int, default=300)
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
