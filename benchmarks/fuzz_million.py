"""A million fuzz inputs over every decoder: does any input end in anything but a typed error?

Seeded random mutations of the project's real fixtures (agy-sim's recorded databases, RPC and
stream-json captures); bounded by a count and a time limit; prints counts and the verdict.

Each decoder gets an equal share of `--count` inputs, round-robin, until the share or `--seconds`
runs out. An input is one mutated unit: a row payload (rows, protowire), an RPC step value
(rpcjson), a few stream-json lines as bytes split at random points (stream-json framing and
events) or as parsed events, Connect envelopes (connect), NDJSON bytes (ndjson), JSON text
(jsontext), and agy's error and `/usage` texts and bodies (quota, verdict). A decoder may return a
value or raise `DecodeError` (its typed, skippable error; `RpcError` for a Connect end-of-stream
error); anything else is a failure and is printed with the input's seed so it can be replayed:
`--replay DECODER:SEED`.

    .venv/bin/python benchmarks/fuzz_million.py                # 1,000,000 inputs, ≤ 10 min
    .venv/bin/python benchmarks/fuzz_million.py --count 100000 --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sqlite3
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the fuzz tests' byte mutator, shared

from test_fuzz_decoders import mutate_bytes as _mutate_bytes  # noqa: E402

from agy_provider.agy.quota import parse_go_duration  # noqa: E402
from agy_provider.agy.quota import parse_usage  # noqa: E402
from agy_provider.agy.quota import quota_from_text  # noqa: E402
from agy_provider.agy.rows import decode_step_row  # noqa: E402
from agy_provider.agy.rpcjson import decode_json_step  # noqa: E402
from agy_provider.agy.streamjson import StreamJsonDecoder  # noqa: E402
from agy_provider.agy.verdict import exit_verdict  # noqa: E402
from agy_provider.errors import DecodeError  # noqa: E402
from agy_provider.errors import RpcError  # noqa: E402
from agy_provider.wire import jsontext  # noqa: E402
from agy_provider.wire.connect import ConnectStreamDecoder  # noqa: E402
from agy_provider.wire.connect import encode_envelope  # noqa: E402
from agy_provider.wire.ndjson import NEED_DATA  # noqa: E402
from agy_provider.wire.ndjson import JsonLineDecoder  # noqa: E402
from agy_provider.wire.protowire import Message  # noqa: E402

FIXTURES = ROOT / "fixtures"
TYPED = (DecodeError, RpcError)

_SPLICES = [
    b"1e400",
    b"9" * 400,
    b"-Infinity",
    b"NaN",
    b'"\\ud800"',
    b"[" * 300,
    b"\xff\xfe",
    b"\n",
    b'{"event":"result","result":{"duration_seconds":' + b"9" * 400 + b"}}",
    b"\x92\x01\xff\xff\x03",
    b"\x00",
]
_HOSTILE: list[Callable[[], Any]] = [
    lambda: 10**400,
    lambda: -(10**400),
    lambda: float("nan"),
    lambda: float("inf"),
    lambda: "\ud800",
    lambda: "a\x1b[31m",
    lambda: None,
    lambda: True,
    lambda: [],
    lambda: {},
    lambda: "x" * 3000,
    lambda: 2**64,
    lambda: "12345678901234567890123",
    lambda: "120h9m43s",
    lambda: {"a": [1, {}]},
]
_TEXTS = [
    "Individual quota reached. Upgrade your plan for more. Resets in 120h9m43s.",
    "AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached … Resets in 3h20m",
    "You have exhausted your capacity on this model. Your quota will reset after 2h13m5s.",
    "panic: boom\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:1 +0x1d",
    "authentication required",
    "5h: 25% remaining, resets in 3h20m",
]
_USAGE = {
    "buckets": [
        {"window": "5h", "remaining_fraction": 0.62, "reset_time": "2026-12-01T23:36:57Z"},
        {"window": "weekly", "used_percent": 13, "resets_in": "103h0m0s"},
    ]
}


def mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    return _mutate_bytes(data, rnd, _SPLICES)


def mutate_value(value: Any, rnd: random.Random, depth: int = 0) -> Any:
    """A copy of a JSON-like value with one node replaced, dropped or retyped."""
    if not isinstance(value, dict | list) or rnd.random() < 0.1 or depth > 30:
        return rnd.choice(_HOSTILE)()
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    keys = list(copy) if isinstance(copy, dict) else list(range(len(copy)))
    if not keys:
        return rnd.choice(_HOSTILE)()
    key = rnd.choice(keys)
    if isinstance(copy, dict) and rnd.random() < 0.2:
        del copy[key]
    else:
        copy[key] = mutate_value(copy[key], rnd, depth + 1)
    return copy


def resplit(data: bytes, rnd: random.Random) -> list[bytes]:
    cuts = sorted(rnd.randint(0, len(data)) for _ in range(rnd.randint(0, 4)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


# -- seeds: the project's own recorded fixtures ------------------------------------------------


def load_seeds() -> dict[str, list[Any]]:
    rows: list[tuple[int, int, int, bytes, bytes | None]] = []
    for db in sorted((FIXTURES / "db").glob("*.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        try:
            rows += conn.execute(
                "SELECT idx, step_type, status, step_payload, error_details FROM steps"
            ).fetchall()
        finally:
            conn.close()
    rpc_steps: list[Any] = []
    for capture in sorted((FIXTURES / "rpc").glob("*.json")):
        document = json.loads(capture.read_text())
        steps = document.get("steps") if isinstance(document, dict) else document
        if isinstance(steps, list):
            rpc_steps += steps
        elif isinstance(document, list):
            rpc_steps += document
    lines: list[bytes] = []
    for capture in sorted((FIXTURES / "stream-json").glob("*.ndjson")):
        lines += capture.read_bytes().splitlines(keepends=True)
    events = [json.loads(line) for line in lines if line.startswith(b"{")]
    return {
        "rows": [r for r in rows if r[3]],
        "rpc": rpc_steps or [{}],
        "lines": lines or [b"{}\n"],
        "events": events or [{}],
    }


# -- one input per decoder ---------------------------------------------------------------------


def fuzz_rows(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    index, step_type, status, payload, error = rnd.choice(seeds["rows"])
    payload = mutate_bytes(payload, rnd)
    error = mutate_bytes(error, rnd) if error and rnd.random() < 0.5 else error
    decode_step_row(index, step_type, status, payload, error_details=error)


def _walk(message: Message, depth: int = 0) -> None:
    for number in sorted(message.numbers())[:12]:
        for read in (message.string, message.bytes_, message.uint, message.int, message.bool):
            with contextlib.suppress(DecodeError):
                read(number)
        if depth < 6:
            try:
                inner = message.message(number)
            except DecodeError:
                inner = None
            if inner is not None:
                _walk(inner, depth + 1)


def fuzz_protowire(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    _walk(Message(mutate_bytes(rnd.choice(seeds["rows"])[3], rnd)))


def fuzz_rpcjson(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    step = mutate_value(rnd.choice(seeds["rpc"]), rnd)
    decode_json_step(step, position=rnd.choice([None, 0, 7]))


def _stream_bytes(seeds: dict[str, list[Any]], rnd: random.Random) -> bytes:
    start = rnd.randrange(len(seeds["lines"]))
    return mutate_bytes(b"".join(seeds["lines"][start : start + rnd.randint(1, 6)]), rnd)


def fuzz_streamjson_bytes(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    decoder = StreamJsonDecoder(on_skip=lambda _reason: None, coalesce=rnd.random() < 0.5)
    try:
        for chunk in resplit(_stream_bytes(seeds, rnd), rnd):
            decoder.receive(chunk)
        decoder.end_of_input()
    except DecodeError:
        pass


def fuzz_streamjson_events(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    decoder = StreamJsonDecoder(on_skip=lambda _reason: None)
    start = rnd.randrange(len(seeds["events"]))
    for event in seeds["events"][start : start + rnd.randint(1, 6)]:
        try:
            decoder.feed_event(mutate_value(event, rnd) if rnd.random() < 0.7 else event)
        except DecodeError:
            continue


def fuzz_connect(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    frames = b"".join(
        encode_envelope(json.dumps(mutate_value(rnd.choice(seeds["rpc"]), rnd)).encode())
        for _ in range(rnd.randint(1, 3))
    )
    body = mutate_bytes(frames + encode_envelope(b"{}", end_stream=True), rnd)
    decoder = ConnectStreamDecoder()
    try:
        for chunk in resplit(body, rnd):
            decoder.feed(chunk)
            while True:
                try:
                    if decoder.next_message() is NEED_DATA:
                        break
                except DecodeError as exc:
                    if type(exc) is DecodeError:
                        continue
                    raise
        decoder.end_of_input()
    except TYPED:
        pass


def fuzz_ndjson(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    decoder = JsonLineDecoder()
    for chunk in resplit(_stream_bytes(seeds, rnd), rnd):
        decoder.feed(chunk)
        while True:
            try:
                if decoder.next_object() is NEED_DATA:
                    break
            except DecodeError:
                continue
    with contextlib.suppress(DecodeError):
        decoder.end_of_input()


def fuzz_jsontext(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    data = _stream_bytes(seeds, rnd)
    try:
        value = jsontext.loads(data)
    except DecodeError:
        value = None
    number = jsontext.finite_number(value)
    assert number is None or math.isfinite(number)
    with contextlib.suppress(DecodeError):
        jsontext.integer(value)
    with contextlib.suppress(DecodeError):
        jsontext.locate_array(data, "steps")


def fuzz_quota(seeds: dict[str, list[Any]], rnd: random.Random) -> None:
    text = mutate_bytes(rnd.choice(_TEXTS).encode(), rnd).decode("utf-8", "replace")
    with contextlib.suppress(DecodeError):
        parse_go_duration(text.rpartition(" ")[2])
    quota_from_text(text, observed_at=rnd.choice([None, 1e9]))
    for bucket in parse_usage(mutate_value(_USAGE, rnd), now=1e9):
        bucket.describe()
    result = mutate_value({"status": "ERROR", "error": text, "denied_actions": []}, rnd)
    exit_verdict(
        rnd.choice([None, 0, 1, 3]),
        stderr=text,
        stdout="",
        result=result if isinstance(result, dict) else None,
        observed_at=1e9,
    )


DECODERS: dict[str, Callable[[dict[str, list[Any]], random.Random], None]] = {
    "rows": fuzz_rows,
    "protowire": fuzz_protowire,
    "rpcjson": fuzz_rpcjson,
    "streamjson-bytes": fuzz_streamjson_bytes,
    "streamjson-events": fuzz_streamjson_events,
    "connect": fuzz_connect,
    "ndjson": fuzz_ndjson,
    "jsontext": fuzz_jsontext,
    "quota": fuzz_quota,
}


def run_one(name: str, seeds: dict[str, list[Any]], seed: int) -> str | None:
    """One input; None when it ended in a value or a typed error, else what escaped."""
    try:
        DECODERS[name](seeds, random.Random(seed))
    except TYPED:
        return None
    except Exception as exc:  # the point of the run: anything untyped is a finding
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs in all")
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--replay", default="", help="DECODER:SEED: run one input, traceback")
    args = parser.parse_args()
    seeds = load_seeds()
    if args.replay:
        name, _, seed = args.replay.partition(":")
        DECODERS[name](seeds, random.Random(int(seed)))
        print("no exception")
        return 0
    print(
        f"fuzz_million: {args.count:,} inputs over {len(DECODERS)} decoders, seed {args.seed}, "
        f"at most {args.seconds:.0f} s; load average {os.getloadavg()[0]:.2f}"
    )
    share = math.ceil(args.count / len(DECODERS))
    counts: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    examples: list[str] = []
    started = time.monotonic()
    deadline = started + args.seconds
    master = random.Random(args.seed)
    names = list(DECODERS)
    stopped_early = False
    while any(counts[n] < share for n in names):
        if time.monotonic() > deadline:
            stopped_early = True
            break
        for name in names:
            if counts[name] >= share:
                continue
            for _ in range(min(50, share - counts[name])):
                seed = master.getrandbits(48)
                counts[name] += 1
                escaped = run_one(name, seeds, seed)
                if escaped is not None:
                    failures[name] += 1
                    if len(examples) < 10:
                        examples.append(f"{name}:{seed}  {escaped}")
    elapsed = time.monotonic() - started
    total = sum(counts.values())
    print(f"{'decoder':<18} {'inputs':>10} {'untyped':>8}")
    for name in names:
        print(f"{name:<18} {counts[name]:>10,} {failures[name]:>8}")
    print(f"{'total':<18} {total:>10,} {sum(failures.values()):>8}  in {elapsed:.0f} s")
    if stopped_early:
        print(f"stopped at the time limit: {total:,} of {args.count:,} inputs ran")
    for example in examples:
        print(f"  untyped: {example}  (replay: --replay {example.split()[0]})")
    print(f"only typed errors: {'yes' if not failures else 'no'}")
    return 0 if not failures else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        traceback.print_exc(limit=1)
        sys.exit(130)
