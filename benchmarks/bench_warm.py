"""Benchmark: warm agy (issue 18) against one `agy -p` per turn, with agy-sim's cold start.

agy-sim starts in `AGY_SIM_COLD_START_MS` (default here 2500, as real agy's 2.3–2.8 s before its
`init`, AGY-FORMATS §2.4). Per event source, in one run:
- one-shot (AGY_WARM=0, the baseline) vs warm turn 2+ vs the first turn of a second conversation
  (answered by the spare): time to the first text, and the provider's overhead on top of agy-sim's
  own time to first text (agy-sim's: from the turn's stdin line to its first text line; ours:
  the rest, from `stream_simple` to the host's first `text_delta`; goal ≤ 100 ms);
- a five-turn conversation's wall time, warm and one-shot (goal: ≤ one cold start + 5 × (agy-sim's
  turn time + 100 ms));
- N concurrent warm conversations (turn 2 of each, `warm_max` = N): all stream (≥ 2 deltas each),
  the provider's overhead per turn, the host loop's lag (goal p99 ≤ 20 ms), the host's RSS (goal
  ≤ 60 MiB) and the pool's memory (its agys' RSS, bounded by `warm_max`); how late each text
  chunk reached the host after agy-sim printed it, and how many came merged with the next; the
  loop thread's time on a CPU and waiting for one; baseline: N one-shot turns at once;
- the abort at each phase of a warm turn (before agy answers, streaming, on a fresh agy in its
  cold start): from `abort()` to the `aborted` event (goal ≤ 200 ms), and no agy left.
Run: `.venv/bin/python benchmarks/bench_warm.py [--cold-ms 2500] [--concurrent 50]`.
`--pin-sims` (Linux, a diagnostic, not the goal's verdict) runs the concurrent sides again with
the host on CPU 0 and every agy-sim on CPU 1: what the host does when fifty simulated agys do
not take its CPU (the lines say how long the loop's thread waited for one, either way).
Nothing here asserts a time; it prints figures and PASS/FAIL against the issue's goals.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live
import psutil

OVERHEAD_GOAL_MS = 100.0
LAG_P99_GOAL_MS = 20.0
HOST_RSS_GOAL_MIB = 60.0
ABORT_GOAL_MS = 200.0


class SimClock:
    """agy-sim's own time per warm turn: from its stdin line to its first text line and its
    `result`, as the warm agy's reader thread sees them (wraps `WarmTurn` for the benchmark)."""

    def __init__(self) -> None:
        from agy_provider.live.warm import turn as warm_turn

        self.turns: dict[int, dict[str, float]] = {}
        # Each turn's text chunks as agy-sim's stdout gave them: (perf_counter, length so far).
        self.chunks: dict[int, list[tuple[float, int]]] = {}
        self.partial: dict[int, bytes] = {}  # each turn's stdout after its last full line
        self.conversations: dict[int, str] = {}  # each turn's conversation ("" for a new one)
        original_start, original_deliver = warm_turn.WarmTurn.start, warm_turn.WarmTurn.deliver
        clock = self

        # Each turn's key: a count, not `id(turn)`, which a later turn may reuse.
        keys = itertools.count()

        async def start(turn: Any) -> None:
            key = turn.bench_key = next(keys)
            clock.turns[key] = {}
            clock.conversations[key] = turn.request.conversation_id
            await original_start(turn)
            clock.turns[key]["sent"] = time.perf_counter()

        def deliver(turn: Any, data: bytes, ended: bool) -> None:
            key = getattr(turn, "bench_key", -1)
            marks = clock.turns.setdefault(key, {})
            # Whole lines only: a read may end inside one.
            held = clock.partial.pop(key, b"") + data
            lines, _, clock.partial[key] = held.rpartition(b"\n")
            if b'"text_delta"' in lines:
                now = time.perf_counter()
                marks.setdefault("first_text", now)
                chunks = clock.chunks.setdefault(key, [])
                for line in lines.splitlines():
                    if b'"text_delta"' in line:
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            grown = len(json.loads(line)["step_update"]["text_delta"])
                            chunks.append((now, (chunks[-1][1] if chunks else 0) + grown))
            if ended:
                marks["result"] = time.perf_counter()
            original_deliver(turn, data, ended)

        warm_turn.WarmTurn.start = start  # type: ignore[method-assign]
        warm_turn.WarmTurn.deliver = deliver  # type: ignore[method-assign]

    def sim_first_text(self) -> list[float]:
        return [
            m["first_text"] - m["sent"]
            for m in self.turns.values()
            if "first_text" in m and "sent" in m
        ]

    def newest(self) -> dict[str, float]:
        return list(self.turns.values())[-1] if self.turns else {}


async def conversation(source: str, turns: int, session: str, cwd: Path) -> list[live.TurnTiming]:
    """`turns` turns of one conversation, each continuing the last (the host's transcript)."""
    from agy_provider import UserMessage

    history: list[Any] = []
    timings = []
    for k in range(turns):
        prompt = f"turn {k}"
        timing = await live.timed_turn(
            source, prompt=prompt, session=session, cwd=cwd, history=history
        )
        timings.append(timing)
        history = [*history, UserMessage(content=prompt, timestamp=0), _final(timing)]
    return timings


_finals: dict[int, Any] = {}


def _final(timing: live.TurnTiming) -> Any:
    return _finals[id(timing)]


def _patch_timed_turn() -> None:
    """Keep each timed turn's final message (the next turn's history needs it)."""
    original = live.timed_turn

    async def timed_turn(*args: Any, **kwargs: Any) -> live.TurnTiming:
        from agy_provider import AssistantMessage
        from agy_provider import TextContent

        timing = await original(*args, **kwargs)
        _finals[id(timing)] = AssistantMessage(
            content=[TextContent(text=timing.text)],
            api="agy",
            provider="agy",
            model="gemini-3.7-flash",
            stop_reason="stop",
            timestamp=0,
        )
        return timing

    live.timed_turn = timed_turn  # type: ignore[assignment]


def pool_memory() -> tuple[int, float]:
    """(warm agys, their trees' RSS in MiB)."""
    from agy_provider.live.warm.pool import POOL

    agys = POOL.agys()
    rss = 0
    for agy in agys:
        for proc in agy.track():
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
    return len(agys), rss / 2**20


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


async def latency(source: str, cwd: Path, clock: SimClock, cold_s: float) -> list[str]:
    from agy_provider.live.warm.pool import POOL

    lines = []
    os.environ["AGY_WARM"] = "0"
    oneshot = await conversation(source, 5, f"oneshot-{source}", cwd)
    os.environ["AGY_WARM"] = "1"
    POOL.shutdown()
    started = time.perf_counter()
    warm = await conversation(source, 5, f"warm-{source}", cwd)
    warm_wall = time.perf_counter() - started
    oneshot_wall = sum(t.end for t in oneshot)
    ok = all(t.ok for t in [*oneshot, *warm])
    sim_turn = [
        m["result"] - m["sent"]
        for m in list(clock.turns.values())[-5:]
        if "result" in m and "sent" in m
    ]
    sim_text = clock.sim_first_text()[-4:]
    overhead = [(t.first_text - s) * 1000 for t, s in zip(warm[1:], sim_text, strict=False)]
    # The spare was started after the conversation's first turn: a host's next new conversation
    # comes once it is up (its `init` said), which is what is measured here.
    for _ in range(400):
        if any(a.state.value == "spare" for a in POOL.agys()):  # a spare that said `init`
            break
        await asyncio.sleep(0.025)
    spare_turn = await live.timed_turn(source, prompt="another", session=f"spare-{source}", cwd=cwd)

    marks = clock.newest()
    spare_overhead = (
        spare_turn.first_text - (marks.get("first_text", 0) - marks.get("sent", 0))
    ) * 1000
    budget = cold_s + sum(sim_turn) + 5 * OVERHEAD_GOAL_MS / 1000
    lines.append(
        f"  {source:>11}  first text: one-shot turn 2+ {live.median([t.first_text for t in oneshot[1:]]) * 1000:7.0f} ms | "
        f"warm turn 2+ {live.median([t.first_text for t in warm[1:]]) * 1000:6.0f} ms | "
        f"spare {spare_turn.first_text * 1000:6.0f} ms   (all done: {verdict(ok and spare_turn.ok)})"
    )
    lines.append(
        f"  {'':>11}  overhead on agy-sim's own first text: warm turn 2+ median "
        f"{live.median(overhead):5.1f} ms max {max(overhead, default=float('nan')):5.1f} ms "
        f"[{verdict(bool(overhead) and max(overhead) <= OVERHEAD_GOAL_MS)} ≤ {OVERHEAD_GOAL_MS:.0f}];  "
        f"spare {spare_overhead:5.1f} ms [{verdict(spare_overhead <= OVERHEAD_GOAL_MS)}]"
    )
    lines.append(
        f"  {'':>11}  5-turn conversation: one-shot {oneshot_wall:5.2f} s | warm {warm_wall:5.2f} s "
        f"(budget one cold start + 5 × (agy-sim's turn + 100 ms) = {budget:5.2f} s: "
        f"{verdict(warm_wall <= budget)})"
    )
    return lines


async def concurrent(n: int, source: str, cwd: Path, clock: SimClock) -> list[str]:
    from agy_provider.live.warm.pool import POOL

    lines = []
    os.environ["AGY_WARM"] = "0"
    probe = live.LagProbe()
    probe.start()
    base = await asyncio.gather(
        *(live.timed_turn(source, session=f"base-{k}", cwd=cwd) for k in range(n))
    )
    await probe.stop()
    base_streamed = sum(t.ok and t.text_deltas >= 2 for t in base)
    base_mib = psutil.Process().memory_info().rss / 2**20
    lines.append(
        f"  one-shot × {n} ({source}): done {sum(t.ok for t in base)}/{n}, streamed (≥ 2 deltas) "
        f"{base_streamed}/{n}, lag p99 {probe.summary()[1]:6.2f} ms, host RSS {base_mib:5.1f} MiB"
    )
    os.environ.update({"AGY_WARM": "1", "AGY_WARM_MAX": str(n), "AGY_WARM_SPARES": "0"})
    POOL.shutdown()
    firsts = await asyncio.gather(
        *(live.timed_turn(source, prompt="one", session=f"c-{k}", cwd=cwd) for k in range(n))
    )
    mark = len(clock.turns)
    probe = live.LagProbe()
    probe.start()
    waits = _loop_thread_cpu()
    histories = [[_user("one"), _final(t)] for t in firsts]
    seconds = await asyncio.gather(
        *(
            live.timed_turn(source, prompt="two", session=f"c-{k}", cwd=cwd, history=histories[k])
            for k in range(n)
        )
    )
    await probe.stop()
    waited = _loop_thread_cpu(waits)
    behind = []  # the provider's overhead: our time to the first text, less agy-sim's own
    delivered = []  # the host's first text after agy-sim wrote its first text
    # Each turn's agy-sim marks, found by its conversation (turns start in any order).
    from agy_provider.store.sessions import SessionStore

    key_of = {clock.conversations.get(turn, ""): turn for turn in list(clock.turns)[mark:]}
    store = SessionStore()
    lateness: list[float] = []  # each text chunk: the host's delta after agy-sim's stdout line
    merged = chunks = 0  # chunks the host got in one delta with the chunk after them
    for k, timing in enumerate(seconds):
        record = store.get(f"c-{k}")
        key = key_of.get(record.conversation_id, -1) if record is not None else -1
        marks = clock.turns.get(key, {})
        if "first_text" in marks and "sent" in marks:
            behind.append((timing.first_text - (marks["first_text"] - marks["sent"])) * 1000)
            delivered.append((timing.called_at + timing.first_text - marks["first_text"]) * 1000)
        late, joined = chunk_lateness(clock.chunks.get(key, []), timing)
        lateness += late
        merged += joined
        chunks += len(late)
    agys, pool_mib = pool_memory()
    host_mib = psutil.Process().memory_info().rss / 2**20
    streamed = sum(t.ok and t.text_deltas >= 2 for t in seconds)
    p99 = probe.summary()[1]
    lines.append(
        f"  warm × {n} ({source}, turn 2): done {sum(t.ok for t in seconds)}/{n}, streamed "
        f"{streamed}/{n} [{verdict(streamed == n)}]; overhead on agy-sim's first text median "
        f"{live.median(behind):5.1f} ms p99 {live.percentile(behind, 99):6.1f} ms "
        f"[{verdict(bool(behind) and live.percentile(behind, 99) <= OVERHEAD_GOAL_MS)}]"
    )
    lines.append(
        f"  {'':>8} first text after agy-sim's first text: median {live.median(delivered):5.1f} "
        f"ms p99 {live.percentile(delivered, 99):6.1f} ms "
        f"[{verdict(bool(delivered) and live.percentile(delivered, 99) <= OVERHEAD_GOAL_MS)} "
        f"≤ {OVERHEAD_GOAL_MS:.0f}: the goal's words, \"first text ≤ 100 ms behind agy-sim's\"; "
        "the overhead above is the stricter reading]"
    )
    lines.append(
        f"  {'':>8} lag p99 {p99:6.2f} ms [{verdict(p99 <= LAG_P99_GOAL_MS)} ≤ {LAG_P99_GOAL_MS:.0f}]; "
        f"host RSS {host_mib:5.1f} MiB [{verdict(host_mib <= HOST_RSS_GOAL_MIB)} ≤ {HOST_RSS_GOAL_MIB:.0f}]; "
        f"pool: {agys} agys (warm_max {n}) holding {pool_mib:7.1f} MiB"
    )
    lines.append(
        f"  {'':>8} each text chunk, the host's delta after agy-sim's stdout line: median "
        f"{live.median(lateness):5.1f} ms p99 {live.percentile(lateness, 99):6.1f} ms max "
        f"{max(lateness, default=float('nan')):6.1f} ms; {merged} of {chunks} chunks came in one "
        "delta with the next"
    )
    lines.append(
        f"  {'':>8} the host's full garbage collections meanwhile: {len(probe.full_collections)}"
        f", longest {max(probe.full_collections, default=0.0):5.1f} ms (each holds the GIL)"
    )
    if waited is not None:
        lines.append(
            f"  {'':>8} the loop's thread: on a CPU {waited[0]:5.0f} ms, runnable but waiting for "
            f"one {waited[1]:5.0f} ms (of the turns' {waited[2]:5.0f} ms)"
        )
    POOL.shutdown()
    return lines


def chunk_lateness(
    chunks: list[tuple[float, int]], timing: live.TurnTiming
) -> tuple[list[float], int]:
    """For each text chunk agy-sim printed (its stdout line's time, the answer's length with
    it): ms until the host's text delta that reached that length; and how many chunks reached the
    host in the same delta as the chunk after them (commits read together)."""
    late = []
    covering = []  # the index of the host delta that first held each chunk
    for seen_at, length in chunks:
        for index, (at, held) in enumerate(timing.deltas):
            if held >= length:
                late.append((timing.called_at + at - seen_at) * 1000)
                covering.append(index)
                break
    joined = sum(a == b for a, b in itertools.pairwise(covering))
    return late, joined


def _loop_thread_cpu(
    since: tuple[float, float, float] | None = None,
) -> tuple[float, float, float] | None:
    """This thread's (ms on a CPU, ms runnable waiting for one, ms of wall clock), from the
    kernel's schedstat; minus `since` when given. None where the kernel does not say (not Linux)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting = (int(v) / 1e6 for v in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    now = (on_cpu, waiting, time.perf_counter() * 1000)
    if since is None:
        return now
    return now[0] - since[0], now[1] - since[1], now[2] - since[2]


def pin_sims(folder: Path) -> bool:
    """Put this host on CPU 0 and every agy-sim it starts on CPU 1 (AGY_BIN becomes a wrapper
    in `folder`); False where that cannot be done (not Linux, or one CPU)."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return False
    cpus = sorted(os.sched_getaffinity(0))
    wrapper = folder / "agy-sim"
    pinning = f"import os,sys; os.sched_setaffinity(0, {{{cpus[1]}}}); os.execv(sys.argv[1], sys.argv[1:])"
    wrapper.write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(pinning)} "
        f'{shlex.quote(live.agy_sim())} "$@"\n'
    )
    wrapper.chmod(0o755)
    os.environ["AGY_BIN"] = str(wrapper)
    os.sched_setaffinity(0, {cpus[0]})
    return True


def _user(text: str) -> Any:
    from agy_provider import UserMessage

    return UserMessage(content=text, timestamp=0)


async def abort_at(phase: str, source: str, cwd: Path) -> tuple[float, bool]:
    """Abort a warm turn at `phase`; (ms from abort() to the `aborted` event, its agy ended)."""
    from agy_provider import AbortSignal
    from agy_provider import Context
    from agy_provider import SimpleStreamOptions
    from agy_provider import stream_simple
    from agy_provider.live.warm.pool import POOL

    session = f"abort-{phase}-{source}"
    if phase == "cold start":
        POOL.shutdown()  # no spare: a fresh agy, aborted in its cold start
        history: list[Any] = []
    else:
        first = await live.timed_turn(source, prompt="one", session=session, cwd=cwd)
        history = [_user("one"), _final(first)]
    signal = AbortSignal()
    stream = stream_simple(
        live.model(),
        Context(messages=[*history, _user("slow")]),
        SimpleStreamOptions(session_id=session, signal=signal),
        cwd=str(cwd),
        event_source=source,
    )
    aborted_at = ended = 0.0
    interrupted: list[psutil.Process] = []
    trigger = {"agy has the turn": "thinking_start", "streaming": "text_delta"}.get(phase, "start")
    async for event in stream:
        if aborted_at == 0.0 and event.type == trigger:
            if phase == "cold start":
                await asyncio.sleep(0.5)
            interrupted = [psutil.Process(a.pid) for a in POOL.agys() if a.state.value == "in_turn"]
            aborted_at = time.perf_counter()
            signal.abort("benchmark")
        if event.type in ("done", "error"):
            ended = time.perf_counter()
    # The aborted turn's agy (a lease the abort cut short is ended beside the turn): gone
    # within 5 s, and nothing of the pool left in a turn?
    _, alive = psutil.wait_procs(interrupted, 5)
    kept = [a for a in POOL.agys() if a.state.value == "in_turn"]
    return (ended - aborted_at) * 1000, not alive and not kept


async def run(args: argparse.Namespace, cwd: Path, log: live.ProviderLog) -> list[str]:
    clock = SimClock()
    verdicts = []
    from agy_provider.plugin_manager import event_sources

    sources = [s for s in ("sqlite", "rpc", "stream-json") if s in event_sources()]
    print(f"\nlatency (median; agy-sim cold start {args.cold_ms} ms):")
    for source in sources:
        os.environ["AGY_EVENT_SOURCE"] = source
        if source == "rpc":
            os.environ.pop("AGY_SIM_NO_SERVER", None)
        else:
            os.environ["AGY_SIM_NO_SERVER"] = "1"
        lines = await latency(source, cwd, clock, args.cold_ms / 1000)
        print("\n".join(lines), flush=True)
        verdicts += lines
        print(log.warnings_text(), flush=True)
    print("\nabort at each phase of a warm turn (sqlite):")
    os.environ["AGY_SIM_NO_SERVER"] = "1"
    for phase in ("agy has the turn", "streaming", "cold start"):
        took, clean = await abort_at(phase, "sqlite", cwd)
        line = (
            f"  {phase:>18}: aborted {took:6.1f} ms after abort() "
            f"[{verdict(took <= ABORT_GOAL_MS)} ≤ {ABORT_GOAL_MS:.0f}]; its agy ended: {verdict(clean)}"
        )
        print(line, flush=True)
        verdicts.append(line)
    print(f"\n{args.concurrent} concurrent conversations (each side in a fresh host process):")
    for source in [s for s in args.concurrent_sources.split(",") if s in sources]:
        lines = concurrent_in_child(args, source)
        print("\n".join(lines), flush=True)
        verdicts += lines
    if args.pin_sims:
        print(
            f"\ndiagnostic, not the goal's verdict: {args.concurrent} concurrent conversations "
            "with the host on CPU 0 and every agy-sim on CPU 1:"
        )
        for source in [s for s in args.concurrent_sources.split(",") if s in sources]:
            lines = concurrent_in_child(args, source, pinned=True)
            print("\n".join(lines), flush=True)
    return verdicts


def concurrent_in_child(
    args: argparse.Namespace, source: str, *, pinned: bool = False
) -> list[str]:
    """`concurrent` in a host process of its own: its RSS is what fifty conversations cost a
    host, not what the sections before them left behind."""
    argv = [sys.executable, __file__, "--concurrent-child", source]
    argv += ["--concurrent", str(args.concurrent), "--cold-ms", str(args.cold_ms)]
    if pinned:
        argv.append("--pin-sims")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("  ")]
    if out.returncode != 0 or not lines:
        return [f"  {source}: the concurrent run failed ({out.returncode}): {out.stderr[-500:]}"]
    return lines


def concurrent_child(args: argparse.Namespace) -> int:
    source = args.concurrent_child
    _patch_timed_turn()
    with live.private_world("agy-bench-warm-") as tmp, live.ProviderLog().installed() as log:
        os.environ["AGY_SIM_COLD_START_MS"] = str(round(args.cold_ms * float(live.SIM_SPEED)))
        os.environ["AGY_TURN_TIMEOUT"] = "120"
        os.environ["AGY_EVENT_SOURCE"] = source
        os.environ["AGY_SIM_NO_SERVER"] = "1"
        if args.pin_sims and not pin_sims(tmp):
            print("  --pin-sims: this machine cannot pin processes to CPUs (not Linux, or one CPU)")
            return 0
        clock = SimClock()
        lines = asyncio.run(concurrent(args.concurrent, source, tmp / "work", clock))
        print("\n".join(lines))
        print(log.warnings_text(), flush=True)
        from agy_provider.live.warm.pool import POOL

        POOL.shutdown()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold-ms", type=int, default=2500, help="agy-sim's cold start")
    parser.add_argument("--concurrent", type=int, default=50, help="concurrent conversations")
    parser.add_argument("--concurrent-sources", default="sqlite,stream-json")
    parser.add_argument("--concurrent-child", default="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--pin-sims",
        action="store_true",
        help="also run the concurrent sides with the host on CPU 0 and the agy-sims on CPU 1 (a diagnostic)",
    )
    args = parser.parse_args()
    if args.concurrent_child:
        return concurrent_child(args)
    live.run_header("bench_warm: warm agy vs one agy -p per turn")
    _patch_timed_turn()
    with live.private_world("agy-bench-warm-") as tmp, live.ProviderLog().installed() as log:
        # agy-sim divides every delay by AGY_SIM_SPEED: this makes its cold start `--cold-ms`.
        os.environ["AGY_SIM_COLD_START_MS"] = str(round(args.cold_ms * float(live.SIM_SPEED)))
        os.environ["AGY_TURN_TIMEOUT"] = "120"
        verdicts = asyncio.run(run(args, tmp / "work", log))
        from agy_provider.live.warm.pool import POOL

        POOL.shutdown()
    print("\nsummary:")
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
