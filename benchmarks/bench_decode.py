"""Benchmark: decoding `steps` rows into Steps, against the `protobuf` package (upb) in the same run.

Goal (issue 3): our row decoder takes no more than 4× upb's time to parse the same payloads with a
schema and read the same fields. Run: `.venv/bin/python benchmarks/bench_decode.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agy_provider.agy.rows import decode_step_row
from agy_provider.errors import DecodeError
from agy_provider.sim.bulk import write_conversation
from agy_provider.wire.protowire import Message

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
PAYLOADS = REFERENCE / "sqlite-payloads"
REAL_FDS = REFERENCE / "schema" / "antigravity_schema.fds"
ANY_STEP_URL = "type.googleapis.com/gemini_coder.Step"
GOAL_RATIO = 4.0

Row = tuple[int, int, int, bytes]


# -- the three decoders under test ----------------------------------------------------------------


def ours(rows: Sequence[Row]) -> int:
    """The production path: `decode_step_row` -> a frozen, normalized `Step` per row."""
    ok = 0
    for idx, step_type, status, payload in rows:
        try:
            decode_step_row(idx, step_type, status, payload)
        except DecodeError:
            continue
        ok += 1
    return ok


def _walk_call(call: Message | None) -> tuple[str, str, str] | None:
    if call is None:
        return None
    return (call.string(1), call.string(2), call.string(3))


def walk_fields(payload: bytes) -> tuple[Any, ...]:
    """The bare walker: `protowire.Message` reading the listed fields into a tuple."""
    msg = Message(payload)
    step_type = msg.uint(1)
    status = msg.uint(4)
    info = tool = usage = None
    execution_id = ""
    created_ms = 0
    meta = msg.message(5)
    if meta is not None:
        si = meta.message(20)
        if si is not None:
            info = (si.string(1), si.uint(2), si.string(4))
        tool = _walk_call(meta.message(4))
        u = meta.message(9)
        if u is not None:
            usage = (u.uint(2), u.uint(3), u.uint(5), u.uint(4))
        execution_id = meta.string(12)
        ts = meta.message(1)
        if ts is not None:
            created_ms = ts.uint(1) * 1000 + ts.uint(2) // 1_000_000
    planner = user = generic = None
    p = msg.message(20)
    if p is not None:
        planner = (
            p.string(1),
            p.string(3),
            p.string(8),
            p.uint(12),
            tuple(_walk_call(c) for c in p.messages(7)),
        )
    us = msg.message(19)
    if us is not None:
        user = (us.string(2), tuple(item.string(1) for item in us.messages(3)))
    g = msg.message(140)
    if g is not None:
        args = {entry.string(1): entry.string(2) for entry in g.messages(1)}
        result = g.path_string(2, 1)
        exit_code = output = None
        any_msg = g.path(2, 6)
        if any_msg is not None and any_msg.string(1) == ANY_STEP_URL:
            inner = any_msg.message(2)
            rc = inner.message(28) if inner is not None else None
            if rc is not None:
                exit_code = rc.int(6)
                output = rc.path_string(21, 1)
        generic = (args, result, exit_code, output)
    return (step_type, status, info, tool, usage, execution_id, created_ms, planner, user, generic)


def walker(rows: Sequence[Row]) -> int:
    for row in rows:
        walk_fields(row[3])
    return len(rows)


def make_upb_reader(step_class: Any) -> Callable[[bytes], tuple[Any, ...]]:
    from_string = step_class.FromString

    def call_fields(call: Any) -> tuple[str, str, str]:
        return (call.id, call.name, call.arguments_json)

    def upb_fields(payload: bytes) -> tuple[Any, ...]:
        """upb: parse with the schema, then read the same fields into the same tuple."""
        msg = from_string(payload)
        step_type = msg.type
        status = msg.status
        info = tool = usage = None
        execution_id = ""
        created_ms = 0
        if msg.HasField("metadata"):
            meta = msg.metadata
            if meta.HasField("source_trajectory_step_info"):
                si = meta.source_trajectory_step_info
                info = (si.trajectory_id, si.step_index, si.cascade_id)
            if meta.HasField("tool_call"):
                tool = call_fields(meta.tool_call)
            if meta.HasField("model_usage"):
                u = meta.model_usage
                usage = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
            execution_id = meta.execution_id
            if meta.HasField("created_at"):
                ts = meta.created_at
                created_ms = ts.seconds * 1000 + ts.nanos // 1_000_000
        planner = user = generic = None
        if msg.HasField("planner_response"):
            p = msg.planner_response
            planner = (
                p.response,
                p.thinking,
                p.modified_response,
                p.stop_reason,
                tuple(call_fields(c) for c in p.tool_calls),
            )
        if msg.HasField("user_input"):
            us = msg.user_input
            user = (us.user_response, tuple(item.text for item in us.items))
        if msg.HasField("generic"):
            g = msg.generic
            args = dict(g.args)
            result = g.result.result
            exit_code = output = None
            if g.result.HasField("payload") and g.result.payload.type_url == ANY_STEP_URL:
                inner = from_string(g.result.payload.value)
                if inner.HasField("run_command"):
                    rc = inner.run_command
                    exit_code = rc.exit_code
                    output = rc.combined_output.full
            generic = (args, result, exit_code, output)
        return (
            step_type,
            status,
            info,
            tool,
            usage,
            execution_id,
            created_ms,
            planner,
            user,
            generic,
        )

    return upb_fields


# -- set-up ---------------------------------------------------------------------------------------


def real_step_class() -> Any:
    from google.protobuf import message_factory

    from agy_provider.sim.descriptors import load_descriptor_set

    pool = load_descriptor_set(REAL_FDS)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gemini_coder.Step"))


def real_rows() -> list[Row]:
    rows: list[Row] = []
    for n, path in enumerate(sorted(PAYLOADS.glob("*.step_payload.bin"))):
        payload = path.read_bytes()
        head = Message(payload)
        rows.append((n, head.uint(1), head.uint(4), payload))
    return rows


def sim_rows(turns: int, text_size: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="agy-bench-decode-") as tmp:
        db = Path(tmp) / "conversation.db"
        writer = write_conversation(db, "bench-decode", turns=turns, text_size=text_size)
        writer.close(checkpoint=True)
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return [
                (idx, t, s, bytes(p))
                for idx, t, s, p in conn.execute(
                    "SELECT idx, step_type, status, step_payload FROM steps ORDER BY idx"
                )
            ]


def timed(fn: Callable[[Sequence[Row]], int], rows: Sequence[Row], repeat: int) -> float:
    """CPU seconds per row of `fn` over `rows`, `repeat` passes.

    Process CPU time, not wall time: on a loaded 2-core machine wall time mostly measures how long
    we waited for a core. Decoding is pure CPU in one thread, so CPU time is its cost.
    """
    gc.collect()
    start = time.process_time()
    for _ in range(repeat):
        fn(rows)
    return (time.process_time() - start) / (repeat * len(rows))


def check_same(rows: Sequence[Row], upb_fields: Callable[[bytes], tuple[Any, ...]]) -> int:
    """The walker and upb must read identical values, or the comparison means nothing."""
    for row in rows:
        mine, theirs = walk_fields(row[3]), upb_fields(row[3])
        if mine != theirs:
            raise SystemExit(f"row {row[0]}: walker and upb disagree\n  {mine}\n  {theirs}")
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--turns", type=int, default=250, help="simulated turns (4 rows each)")
    parser.add_argument("--text-size", type=int, default=600)
    parser.add_argument("--profile", action="store_true", help="cProfile our decoder and exit")
    args = parser.parse_args()

    print("bench_decode: steps rows -> Step, ours vs protobuf (upb)")
    from google.protobuf import __version__ as pb_version
    from google.protobuf.internal import api_implementation

    sets: dict[str, list[Row]] = {}
    if PAYLOADS.is_dir():
        sets["real"] = real_rows()
    else:
        print(f"  note: {PAYLOADS} is absent; the real payload set is skipped")
    sets["sim"] = sim_rows(args.turns, args.text_size)
    if REAL_FDS.is_file():
        step_class, schema = real_step_class(), f"the real schema ({REAL_FDS.name})"
    else:
        from agy_provider.sim.descriptors import Step as step_class

        schema = "the simulator's own descriptors (agy_provider.sim.descriptors)"
    upb_fields = make_upb_reader(step_class)

    def upb(rows: Sequence[Row]) -> int:
        for row in rows:
            upb_fields(row[3])
        return len(rows)

    print(f"  protobuf {pb_version} ({api_implementation.Type()}), schema: {schema}")
    for name, rows in sets.items():
        size = sum(len(r[3]) for r in rows)
        print(
            f"  set {name}: {len(rows)} rows, {size} payload bytes "
            f"(mean {size // len(rows)} B), walker == upb on {check_same(rows, upb_fields)} rows"
        )
    print("  ours:   decode_step_row(idx, step_type, status, payload) -> frozen Step per row")
    print("          (also parses tool arguments JSON, maps kinds/statuses, builds ToolCall/Usage)")
    print("  walker: protowire.Message reading the fields below into a tuple")
    print("  upb:    Step.FromString(payload), then the same fields into the same tuple; the")
    print("          140.2.6 Any's value parsed again as a Step (28.6 exit code, 28.21.1 output)")
    print("  fields: 1, 4, 5.20.{1,2,4}, 5.4.{1,2,3}, 5.9.{2,3,5,4}, 5.12, 5.1, 20.{1,3,8,12},")
    print("          20.7[].{1,2,3}, 19.2, 19.3[].1, 140.1 map, 140.2.1, 140.2.6 -> 28.6, 28.21.1")

    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(5):
            ours(sets["sim"])
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return 0

    # Each timing covers about 4k rows (~0.03-0.2 s); short, interleaved timings let every side
    # see the same machine load, and the per-round ratio pairs timings taken moments apart.
    sides = {"ours": ours, "walker": walker, "upb": upb}
    samples: dict[tuple[str, str], list[float]] = {(s, side): [] for s in sets for side in sides}
    for _ in range(args.rounds):
        for set_name, rows in sets.items():
            repeat = max(1, 4_000 // len(rows))
            for side, fn in sides.items():  # interleaved: every round times every side
                samples[(set_name, side)].append(timed(fn, rows, repeat))

    total_rows = sum(len(r) for r in sets.values())
    print(f"\n  {args.rounds} interleaved rounds, CPU time; best and median per row -> steps/s")
    print(f"  {'set':<8}{'side':<8}{'best steps/s':>14}{'median steps/s':>16}{'µs/row (best)':>15}")
    ratios: dict[str, tuple[float, float]] = {}
    for set_name in [*sets, "overall"]:
        for side in sides:
            if set_name == "overall":
                # Every row of every set once: weight each set's per-row time by its row count.
                per_round = [
                    sum(samples[(s, side)][i] * len(sets[s]) for s in sets) / total_rows
                    for i in range(args.rounds)
                ]
            else:
                per_round = samples[(set_name, side)]
            samples[(set_name, side)] = per_round
            best, median = min(per_round), statistics.median(per_round)
            print(
                f"  {set_name:<8}{side:<8}{1 / best:>14,.0f}{1 / median:>16,.0f}{best * 1e6:>15.2f}"
            )
        ours_t, upb_t = samples[(set_name, "ours")], samples[(set_name, "upb")]
        walk_t = samples[(set_name, "walker")]
        paired = statistics.median(o / u for o, u in zip(ours_t, upb_t, strict=True))
        walk_paired = statistics.median(w / u for w, u in zip(walk_t, upb_t, strict=True))
        ratios[set_name] = (min(ours_t) / min(upb_t), paired)
        print(
            f"  {set_name:<8}time ratio ours/upb: {paired:.2f}x (median of per-round ratios), "
            f"{ratios[set_name][0]:.2f}x (best/best); walker/upb {walk_paired:.2f}x"
        )

    print(f"\n  goal: ours <= {GOAL_RATIO:.0f}x upb's time (median of per-round ratios)")
    for set_name, (_best, paired) in ratios.items():
        label = "overall (every row once)" if set_name == "overall" else f"set {set_name}"
        verdict = "PASS" if paired <= GOAL_RATIO else "FAIL"
        print(f"    {label}: {paired:.2f}x -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
