"""Fuzz targets, one per decoder: any input ends in a value or the decoder's own typed error.

Hypothesis drives each target with hostile and near-valid inputs. The default run is small and
fast; `AGY_FUZZ_LONG=1` selects the long profile (`AGY_FUZZ_EXAMPLES` examples per target,
default 150,000) and `AGY_FUZZ_COUNTS=path` appends how many inputs each target ran, so a long
run can report its total. Every crasher a run found is kept in `test_hostile_inputs.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.quota import parse_go_duration
from agy_provider.agy.quota import parse_usage
from agy_provider.agy.quota import quota_from_text
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.agy.verdict import exit_verdict
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.cli import main
from agy_provider.errors import DecodeError
from agy_provider.errors import RpcError
from agy_provider.errors import UsageError
from agy_provider.offline.formatters import event_line
from agy_provider.offline.formatters import markdown
from agy_provider.offline.formatters import step_line
from agy_provider.offline.formatters import transcript
from agy_provider.offline.replay import detect_format
from agy_provider.wire import jsontext
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import parse_error_body
from agy_provider.wire.ndjson import NEED_DATA
from agy_provider.wire.ndjson import JsonLineDecoder
from agy_provider.wire.protowire import Message

LONG = os.environ.get("AGY_FUZZ_LONG") == "1"
EXAMPLES = int(os.environ.get("AGY_FUZZ_EXAMPLES", "150000"))
settings.register_profile(
    "fuzz-default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz-long",
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
FUZZ = settings.get_profile("fuzz-long" if LONG else "fuzz-default")
# A long run takes as long as it takes: the suite's per-test timeout (a hang guard) is lifted.
pytestmark = [pytest.mark.timeout(0)] if LONG else []
# Each example feeds a batch of inputs to its decoder: hypothesis's per-example bookkeeping is
# then paid once per batch, which is what makes a run of a million inputs affordable.
BATCH = int(os.environ.get("AGY_FUZZ_BATCH", "8" if LONG else "2"))


def batch(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(strategy, min_size=1, max_size=BATCH)


COUNTS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _record_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """With AGY_FUZZ_COUNTS set, append each target's input count as it ends."""
    COUNTS.clear()
    yield
    target = os.environ.get("AGY_FUZZ_COUNTS")
    if target and COUNTS:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"test": request.node.name, **COUNTS}) + "\n")


def counted(name: str, inputs: int = 1) -> None:
    COUNTS[name] += inputs


# -- shared checks: what a decoded value must be fit for --------------------------------------


def assert_printable_json(value: Any) -> None:
    """Strict JSON that encodes as UTF-8: what every line we print must be."""
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


def assert_step_usable(step: Step) -> None:
    """A decoded Step goes everywhere a Step goes: JSON lines, the assembler, every format."""
    assert isinstance(step, Step)
    assert_printable_json(step.to_json())
    step_line(step).encode("utf-8")
    assembler = StepAssembler(model="agy", track_partial=False)
    events = [*assembler.start(), *assembler.feed([step]), *assembler.finish(None)]
    for event in events:
        event_line(event).encode("utf-8")
    last = events[-1]
    message = last.message if last.type == "done" else last.error  # type: ignore[union-attr]
    for line in [*transcript([(1, "", message)]), *markdown([(1, "", message)])]:
        line.encode("utf-8")


# -- strategies -------------------------------------------------------------------------------

HOSTILE_TEXT = st.sampled_from(
    [
        "\ud800",
        "a\udfffb",
        "\x1b[2J\x07",
        "\u2028\u0085\r",
        "\x00",
        "\x9b31m",
        "é" * 3,
        "𝄞",
        "[" * 3000,
        '[{"TargetContent": NaN}]',
    ]
)
TEXT = st.text(max_size=12) | HOSTILE_TEXT
NUMBERS = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([2**64, -(2**63) - 1, 0, 1, 7, 15, 10**400 - 1, -(10**400)])
    # Built lazily: hypothesis cannot repr() an int past the 4,300-digit limit.
    | st.integers(4301, 5000).map(lambda digits: 10**digits - 1)
)
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def deep(n: int) -> Any:
    value: Any = "bottom"
    for _ in range(n):
        value = [value]
    return value


ANY_VALUE = JSON_VALUES | st.builds(deep, st.integers(150, 2500))


def shaped(schema: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with any subset of these keys, each value plausible or of any type at all."""
    return st.fixed_dictionaries({}, optional={k: v | ANY_VALUE for k, v in schema.items()})


# Tools whose arguments the assembler reads (edits are rendered as diffs from them).
TOOL_NAMES = st.sampled_from(
    [
        "run_command",
        "view_file",
        "list_dir",
        "replace_file_content",
        "multi_replace_file_content",
        "write_to_file",
        "grep_search",
    ]
)
ARG_NAMES = st.sampled_from(
    [
        "CommandLine",
        "TargetFile",
        "TargetContent",
        "ReplacementContent",
        "ReplacementChunks",
        "CodeContent",
        "StartLine",
        "EndLine",
        "AbsolutePath",
        "DirectoryPath",
        "Query",
    ]
)
STEP_TYPES = st.sampled_from(
    [
        "CORTEX_STEP_TYPE_" + n
        for n in (
            "PLANNER_RESPONSE",
            "USER_INPUT",
            "RUN_COMMAND",
            "GENERIC",
            "ERROR_MESSAGE",
            "CHECKPOINT",
            "FINISH",
            "SYSTEM_MESSAGE",
            "BOGUS",
        )
    ]
)
STATUSES = st.sampled_from(
    ["CORTEX_STEP_STATUS_" + n for n in ("DONE", "RUNNING", "GENERATING", "WAITING", "ERROR")]
)
# Integers past a float's range (`float()` of them overflows) are numbers JSON can carry.
COUNT = (
    st.integers(0, 10**6)
    | st.integers(0, 10**6).map(str)
    | st.sampled_from([10**308 * 10, 10**400 - 1])
    | ANY_VALUE
)
TOOL_CALL = shaped(
    {
        "id": TEXT,
        "name": TEXT | TOOL_NAMES,
        "argumentsJson": TEXT
        | st.sampled_from(
            ['{"CommandLine":"ls"}', '{"a":NaN}', "[" * 3000, '{"a":1e400}', '{"a":"\\ud800"}']
        ),
    }
)
RPC_STEP = shaped(
    {
        "type": STEP_TYPES,
        "status": STATUSES,
        "metadata": shaped(
            {
                "sourceTrajectoryStepInfo": shaped(
                    {"stepIndex": COUNT, "cascadeId": TEXT, "trajectoryId": TEXT}
                ),
                "toolCall": TOOL_CALL,
                "modelUsage": shaped(
                    {"inputTokens": COUNT, "outputTokens": COUNT, "cacheReadTokens": COUNT}
                ),
                "createdAt": st.sampled_from(
                    ["2026-01-01T00:00:00.123456789Z", "2026-01-01T00:00:00.²Z", "x"]
                )
                | TEXT,
                "argumentsOrder": st.lists(TEXT | st.just("CommandLine"), max_size=3),
                "executionId": TEXT,
            }
        ),
        "plannerResponse": shaped(
            {
                "response": TEXT,
                "modifiedResponse": TEXT,
                "thinking": TEXT,
                "toolCalls": st.lists(TOOL_CALL, max_size=2),
                "stopReason": TEXT,
            }
        ),
        "userInput": shaped(
            {
                "items": st.lists(shaped({"text": TEXT}), max_size=2),
                "userResponse": TEXT,
                "query": TEXT,
            }
        ),
        "runCommand": shaped(
            {"commandLine": TEXT, "exitCode": COUNT, "combinedOutput": shaped({"full": TEXT})}
        ),
        "generic": shaped(
            {
                "args": st.dictionaries(TEXT | ARG_NAMES, ANY_VALUE | TEXT, max_size=3),
                "result": shaped({"result": TEXT, "payload": ANY_VALUE}),
            }
        ),
        "listDirectory": shaped({"results": st.lists(shaped({"name": TEXT}), max_size=3)}),
        "askQuestion": shaped(
            {"questions": st.lists(shaped({"question": TEXT, "options": ANY_VALUE}), max_size=2)}
        ),
        "errorMessage": shaped({"error": shaped({"shortError": TEXT, "userErrorMessage": TEXT})}),
        "checkpoint": shaped({"userIntent": TEXT}),
        "requestedInteraction": shaped({"permission": ANY_VALUE, "askQuestion": ANY_VALUE}),
    }
)

STREAM_EVENT = st.fixed_dictionaries(
    {
        "event": st.sampled_from(["init", "step_update", "result", "command_result", "user"])
        | ANY_VALUE
    },
    optional={
        "conversation_id": TEXT,
        "init": shaped({"cwd": TEXT, "tools": ANY_VALUE, "permission_mode": TEXT, "model": TEXT}),
        "command": shaped({"name": TEXT, "data": ANY_VALUE}),
        "step_update": shaped(
            {
                "step_index": COUNT,
                "state": st.sampled_from(["ACTIVE", "DONE", "ERROR", "CANCELED"]),
                "step_type": st.sampled_from(
                    [
                        "user_input",
                        "agent_response",
                        "tool",
                        "checkpoint",
                        "subagent",
                        "system_message",
                        "finish",
                        "error_message",
                        "unknown",
                    ]
                ),
                "text_delta": TEXT,
                "tool_name": TEXT,
                "tool_info": shaped(
                    {
                        "name": TEXT,
                        "parameters": ANY_VALUE,
                        "output": TEXT,
                        "error": shaped({"type": TEXT, "message": TEXT}),
                    }
                ),
                "error": shaped({"type": TEXT, "message": TEXT}),
                "usage": shaped(
                    {"input_tokens": COUNT, "output_tokens": COUNT, "cache_read_tokens": COUNT}
                ),
                "subagent_info": ANY_VALUE,
                "duration_seconds": COUNT,
            }
        ),
        "result": shaped(
            {
                "status": st.sampled_from(["SUCCESS", "ERROR", "CANCELED"]),
                "response": TEXT,
                "error": ANY_VALUE,
                "num_turns": COUNT,
                "usage": shaped({"input_tokens": COUNT, "output_tokens": COUNT}),
                "denied_actions": ANY_VALUE,
                "duration_seconds": COUNT,
                "command": shaped({"name": TEXT, "data": ANY_VALUE}),
            }
        ),
        "status": TEXT,
        "response": TEXT,
    },
)

RAW_JSON_SNIPPETS = st.sampled_from(
    [
        b"1e400",
        b"-Infinity",
        b"NaN",
        b"1" * 4400,
        b"[" * 2000 + b"]" * 2000,
        b'"\\ud800"',
        b'{"a":' * 1500,
        b"\xff\xfe",
        b'"\\udc00\\ud800"',
        b"{}",
        b"[]",
        b"null",
    ]
)


# Each input hypothesis draws is also fed as MUTANTS cheap random mutations of itself (bytes
# flipped, hostile snippets spliced in, subtrees replaced): hypothesis finds the shapes, the
# mutations multiply them, and a long run reaches a million inputs in reasonable time.
MUTANTS = int(os.environ.get("AGY_FUZZ_MUTANTS", "40" if LONG else "2"))
_SPLICES = [
    b"1e400",
    b"-Infinity",
    b"NaN",
    b"1" * 4400,
    b"[" * 2000,
    b'"\\ud800"',
    b"\\udfff",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xc3",
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    "\u2028".encode(),
    "\x85".encode(),
    b"\x1b[2J",
    b"\x07",
    b"\xc2\x9b",
]
_HOSTILE_VALUES: list[Callable[[], Any]] = [
    lambda: math.nan,
    lambda: math.inf,
    lambda: -math.inf,
    lambda: 10**5000,
    lambda: 2**64,
    lambda: -1,
    lambda: deep(2000),
    lambda: deep(300),
    lambda: "\ud800",
    lambda: "a\x1b[31m\x07",
    lambda: None,
    lambda: True,
    lambda: [],
    lambda: {},
    lambda: "x" * 5000,
    lambda: "[" * 3000,
    lambda: 1.5,
    lambda: "CORTEX_STEP_STATUS_DONE",
    lambda: "12345678901234567890123",
    lambda: {"a": [1, {}]},
]


def mutate_bytes(data: bytes, rnd: random.Random, splices: Sequence[bytes] = ()) -> bytes:
    """`data` with 1–4 random edits: a byte changed, a hostile splice (`splices`, else this
    file's own) inserted, bytes cut, the tail dropped, a run repeated, random bytes inserted.
    Shared with `benchmarks/fuzz_million.py`."""
    splices = splices or _SPLICES
    buffer = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        at = rnd.randint(0, len(buffer))
        op = rnd.randrange(6)
        if op == 0 and buffer:
            buffer[min(at, len(buffer) - 1)] = rnd.randrange(256)
        elif op == 1:
            buffer[at:at] = rnd.choice(splices)
        elif op == 2:
            del buffer[at : at + rnd.randint(1, 16)]
        elif op == 3:
            del buffer[at:]
        elif op == 4 and buffer:
            start = rnd.randrange(len(buffer))
            buffer[at:at] = buffer[start : start + rnd.randint(1, 32)]
        else:
            buffer[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
    return bytes(buffer)


def mutate_value(value: Any, rnd: random.Random) -> Any:
    """A copy of a JSON-like value with one node replaced, dropped or retyped."""
    if not isinstance(value, dict | list) or rnd.random() < 0.15:
        return rnd.choice(_HOSTILE_VALUES)()
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    keys = list(copy) if isinstance(copy, dict) else list(range(len(copy)))
    if not keys:
        return rnd.choice(_HOSTILE_VALUES)()
    key = rnd.choice(keys)
    if isinstance(copy, dict) and rnd.random() < 0.2:
        del copy[key]
    else:
        copy[key] = mutate_value(copy[key], rnd)
    return copy


def variants(
    seed: Any, rnd: random.Random, mutate: Callable[[Any, random.Random], Any]
) -> Iterator[Any]:
    yield seed
    for _ in range(MUTANTS):
        yield mutate(seed, rnd)


def dumps_loose(value: Any) -> bytes:
    """JSON as Python writes it by default: NaN and Infinity included; lone surrogates kept."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        return b"[]"
    return text.encode("utf-8", "surrogatepass")


JSON_BYTES = (
    st.binary(max_size=64)
    | RAW_JSON_SNIPPETS
    | JSON_VALUES.map(dumps_loose)
    | RPC_STEP.map(dumps_loose)
    | STREAM_EVENT.map(dumps_loose)
)


def resplit(data: bytes, rnd: random.Random) -> list[bytes]:
    cuts = sorted(rnd.randint(0, len(data)) for _ in range(rnd.randint(0, 4)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def split_points(data: bytes) -> st.SearchStrategy[list[bytes]]:
    return st.lists(st.integers(0, len(data)), max_size=4).map(
        lambda cuts: [
            data[a:b] for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)], strict=True)
        ]
    )


CHUNKED_NDJSON = (
    st.lists(JSON_BYTES, min_size=1, max_size=5)
    .map(lambda lines: b"\n".join(lines))
    .flatmap(split_points)
)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


FIELD_NUMBERS = st.sampled_from(
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 19, 20, 21, 23, 24, 28, 30, 56, 140, 536870911]
) | st.integers(1, 2**29 - 1)


def _field(number: int, wire: int, value: bytes | int) -> bytes:
    key = _varint((number << 3) | wire)
    if wire == 0:
        assert isinstance(value, int)
        return key + _varint(value)
    if wire == 1:
        return key + (value if isinstance(value, bytes) else b"")[:8].ljust(8, b"\0")
    if wire == 5:
        return key + (value if isinstance(value, bytes) else b"")[:4].ljust(4, b"\0")
    assert isinstance(value, bytes)
    return key + _varint(len(value)) + value


PROTO = st.recursive(
    st.binary(max_size=24) | TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    lambda inner: st.lists(
        st.builds(_field, FIELD_NUMBERS, st.just(2), inner)
        | st.builds(_field, FIELD_NUMBERS, st.just(0), st.integers(0, 2**64 - 1))
        | st.builds(_field, FIELD_NUMBERS, st.sampled_from([1, 5]), st.binary(max_size=8)),
        max_size=5,
    ).map(b"".join),
    max_leaves=16,
)
PROTO_BYTES = (
    PROTO
    | st.binary(max_size=80)
    | PROTO.flatmap(
        lambda d: st.integers(0, max(len(d) - 1, 0)).map(lambda cut: d[:cut])  # truncated
    )
)


# -- 1. the protobuf walker -------------------------------------------------------------------


def walk(message: Message, depth: int = 0) -> None:
    """Read every field every way a decoder might; nested messages to a bounded depth."""
    for number in sorted(message.numbers())[:12]:
        for read in (
            message.string,
            message.bytes_,
            message.uint,
            message.int,
            message.bool,
            message.packed_uints,
            message.messages,
            message.message,
            message.strings,
        ):
            try:
                value = read(number)
            except DecodeError:
                continue
            if isinstance(value, str):
                value.encode("utf-8")
            if isinstance(value, Message) and depth < 4:
                walk(value, depth + 1)
            if isinstance(value, list) and depth < 4:
                for item in value[:3]:
                    if isinstance(item, Message):
                        walk(item, depth + 1)


@FUZZ
@given(batch(PROTO_BYTES), st.randoms(use_true_random=False))
def test_fuzz_protobuf_walker(seeds: list[bytes], rnd: random.Random) -> None:
    for data in (v for seed in seeds for v in variants(seed, rnd, mutate_bytes)):
        counted("protowire")
        try:
            message = Message(data)
            message.fields()
            walk(message)
            message.path_string(1, 19)
        except DecodeError:
            pass


# -- 2. the Connect envelope parser -----------------------------------------------------------


def envelope(flags: int, payload: bytes) -> bytes:
    return bytes([flags]) + len(payload).to_bytes(4, "big") + payload


CONNECT_BODIES = (
    st.lists(
        st.builds(envelope, st.sampled_from([0, 0, 0, 2, 1, 0x80]), JSON_BYTES)
        | st.binary(max_size=12),
        max_size=5,
    )
    .map(b"".join)
    .flatmap(split_points)
)


@FUZZ
@given(
    batch(st.tuples(CONNECT_BODIES, JSON_BYTES, st.integers(100, 599))),
    st.randoms(use_true_random=False),
)
def test_fuzz_connect_envelopes(
    seeds: list[tuple[list[bytes], bytes, int]], rnd: random.Random
) -> None:
    for chunks, error_body, status in seeds:
        decode_connect_body(chunks)
        counted("connect")
        for body in variants(b"".join(chunks), rnd, mutate_bytes):
            counted("connect")
            decode_connect_body(resplit(body, rnd))
            error = parse_error_body(status, mutate_bytes(error_body, rnd))
            assert isinstance(error, RpcError)
            str(error).encode("utf-8")


def decode_connect_body(chunks: list[bytes]) -> None:
    decoder = ConnectStreamDecoder()
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while True:
                try:
                    message = decoder.next_message()
                except DecodeError as exc:
                    if type(exc) is DecodeError:
                        continue  # a bad frame: skippable
                    raise
                if message is NEED_DATA:
                    break
                assert isinstance(message, dict)
                assert_printable_json(message)
        decoder.end_of_input()
    except (DecodeError, RpcError) as exc:
        str(exc).encode("utf-8")


# -- 3. the NDJSON framer ---------------------------------------------------------------------


@FUZZ
@given(batch(CHUNKED_NDJSON), st.randoms(use_true_random=False))
def test_fuzz_ndjson_framer(seeds: list[list[bytes]], rnd: random.Random) -> None:
    for chunks in seeds:
        counted("ndjson")
        frame_ndjson(chunks)
        for body in variants(b"".join(chunks), rnd, mutate_bytes):
            counted("ndjson")
            frame_ndjson(resplit(body, rnd))


def frame_ndjson(chunks: list[bytes]) -> None:
    decoder = JsonLineDecoder()
    objects: list[dict[str, Any]] = []

    def drain() -> None:
        while True:
            try:
                value = decoder.next_object()
            except DecodeError as exc:
                assert type(exc) is DecodeError
                continue
            if value is NEED_DATA:
                return
            objects.append(value)

    for chunk in chunks:
        decoder.feed(chunk)
        drain()
    try:
        tail = decoder.end_of_input()
    except DecodeError:
        tail = None
    if tail is not None:
        objects.append(tail)
    for value in objects:
        assert isinstance(value, dict)
        assert_printable_json(value)  # finite, valid text, shallow enough to re-encode
    assert len(objects) <= b"".join(chunks).count(b"\n") + 1


# -- 4. the RPC JSON step decoder ---------------------------------------------------------------


@FUZZ
@given(
    batch(st.tuples(RPC_STEP | ANY_VALUE, st.none() | st.integers(0, 2**31))),
    st.randoms(use_true_random=False),
)
def test_fuzz_rpc_json_steps(seeds: list[tuple[Any, int | None]], rnd: random.Random) -> None:
    for seed, position in seeds:
        for raw in variants(seed, rnd, mutate_value):
            counted("rpcjson")
            decode_rpc(raw, position)


def decode_rpc(raw: Any, position: int | None) -> None:
    try:
        step = decode_json_step(raw, position=position)
    except DecodeError:
        return
    assert_step_usable(step)


# -- 5. the stream-json decoder -----------------------------------------------------------------


@FUZZ
@given(
    st.lists(STREAM_EVENT | ANY_VALUE, min_size=1, max_size=6),
    st.randoms(use_true_random=False),
)
def test_fuzz_stream_json_events(seed: list[Any], rnd: random.Random) -> None:
    for events in variants(seed, rnd, mutate_value):
        counted("streamjson")
        feed_stream_json(events if isinstance(events, list) else [events])


def feed_stream_json(events: list[Any]) -> None:
    decoder = StreamJsonDecoder()
    for event in events:
        try:
            item = decoder.feed(event)
        except DecodeError:
            continue
        if isinstance(item, Step):
            assert_step_usable(item)
        else:
            assert item is None or isinstance(item, TurnOutcome)


@FUZZ
@given(batch(CHUNKED_NDJSON), st.randoms(use_true_random=False))
def test_fuzz_stream_json_bytes(seeds: list[list[bytes]], rnd: random.Random) -> None:
    for chunks in seeds:
        counted("streamjson-bytes")
        decode_stream_json_bytes(chunks)
        for body in variants(b"".join(chunks), rnd, mutate_bytes):
            counted("streamjson-bytes")
            decode_stream_json_bytes(resplit(body, rnd))


def decode_stream_json_bytes(chunks: list[bytes]) -> None:
    skipped: list[str] = []
    decoder = StreamJsonDecoder(on_skip=skipped.append)
    items: list[Any] = []
    try:
        for chunk in chunks:
            items.extend(decoder.receive(chunk))
        items.extend(decoder.end_of_input())
    except DecodeError:
        pass
    for item in items:
        if isinstance(item, Step):
            assert_step_usable(item)


# -- 6. the row decoder -----------------------------------------------------------------------


ROWS = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 5, 14, 15, 17, 21, 23, 132, 98, 999]) | st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 12) | st.integers(-(2**63), 2**63 - 1),
    st.none() | PROTO_BYTES,
    st.none() | PROTO_BYTES,
    st.none() | PROTO_BYTES,
)


@FUZZ
@given(batch(ROWS), st.randoms(use_true_random=False))
def test_fuzz_step_rows(
    seeds: list[tuple[int, int, int, Any, Any, Any]], rnd: random.Random
) -> None:
    for index, step_type, status, seed, meta, error_details in seeds:
        for payload in variants(seed or b"", rnd, mutate_bytes):
            counted("rows")
            decode_row(index, step_type, status, payload, meta, error_details)


def decode_row(
    index: int, step_type: int, status: int, payload: bytes, meta: Any, error_details: Any
) -> None:
    try:
        step = decode_step_row(
            index, step_type, status, payload, metadata=meta, error_details=error_details
        )
    except DecodeError:
        return
    assert_step_usable(step)


# -- 7. replay: format detection and the whole command ----------------------------------------

FIXTURE_FILES = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".md")


def mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    buffer = bytearray(data)
    for at, value in edits:
        if buffer:
            buffer[at % len(buffer)] = value
    return bytes(buffer)


FILE_CONTENTS = (
    st.lists(JSON_BYTES, max_size=6).map(lambda lines: b"\n".join(lines))
    | st.lists(RPC_STEP, max_size=4).map(lambda steps: dumps_loose({"steps": steps}))
    | st.lists(STREAM_EVENT, max_size=6).map(
        lambda events: b"\n".join(dumps_loose(e) for e in events)
    )
    | st.builds(
        mutate,
        st.sampled_from(FIXTURE_FILES).map(Path.read_bytes),
        st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), max_size=8),
    )
    | st.binary(max_size=128).map(lambda b: b"SQLite format 3\x00" + b)
)


def run_replay(path: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["replay", path, *args], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(
    batch(st.tuples(FILE_CONTENTS, st.sampled_from(["events", "steps", "transcript", "markdown"])))
)
def test_fuzz_replay_any_file(inputs: list[tuple[bytes, str]]) -> None:
    # Not mutated further: each input is a file and a whole CLI run, the costliest target.
    counted("replay", len(inputs))
    for content, fmt in inputs:
        replay_content(content, fmt)


def replay_content(content: bytes, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "capture")
        Path(path).write_bytes(content)
        with contextlib.suppress(UsageError):
            detect_format(path)
        code, out, err = run_replay(path, "--format", fmt, "--turn", "all")
        assert code in (0, 2), err
        out.encode("utf-8")
        err.encode("utf-8")
        assert "please report this as a bug" not in err, err
        if fmt in ("events", "steps"):
            for line in out.splitlines():
                json.loads(line, parse_constant=_no_constants)
        else:
            assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
        assert sorted(os.listdir(folder)) == ["capture"]


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} printed as JSON")


# -- 8. the JSON layer (jsontext) ---------------------------------------------------------------


@FUZZ
@given(batch(JSON_BYTES), st.randoms(use_true_random=False))
def test_fuzz_jsontext(seeds: list[bytes], rnd: random.Random) -> None:
    for seed in seeds:
        for data in variants(seed, rnd, mutate_bytes):
            counted("jsontext")
            decode_jsontext(data)


def decode_jsontext(data: bytes) -> None:
    try:
        value = jsontext.loads(data)
    except DecodeError:
        value = None
    else:
        assert_printable_json(value)
    number = jsontext.finite_number(value)
    assert number is None or math.isfinite(number)
    with contextlib.suppress(DecodeError):
        jsontext.integer(value)
    with contextlib.suppress(DecodeError):
        spans = jsontext.locate_array(data, "steps")
        for start, end in spans or []:
            assert 0 <= start <= end <= len(data)


# -- 9. agy's quota words, /usage bodies and its verdict on a turn (agy/quota.py, verdict.py) ---

QUOTA_TEXT = (
    TEXT
    | st.sampled_from(
        [
            "Individual quota reached. Resets in 120h9m43s.",
            "AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached. Resets in 3h20m",
            "resets in 9" + "9" * 60 + "h",
            "Resets in 1.5.5h",
            "RESOURCE_EXHAUSTED resets after 1e400s",
            "goroutine 1 [running]:\n\tmain.go:1 +0x1",
        ]
    )
    | st.text(max_size=80)
)


@FUZZ
@given(
    batch(st.tuples(QUOTA_TEXT, ANY_VALUE | STREAM_EVENT, st.none() | st.integers(-3, 300))),
    st.randoms(use_true_random=False),
)
def test_fuzz_quota_parser(seeds: list[tuple[str, Any, int | None]], rnd: random.Random) -> None:
    for text, body, code in seeds:
        for value in variants(body, rnd, mutate_value):
            counted("quota")
            decode_quota(text, value, code)


def decode_quota(text: str, body: Any, code: int | None) -> None:
    with contextlib.suppress(DecodeError):
        assert math.isfinite(parse_go_duration(text))
    info = quota_from_text(text, observed_at=1e9)
    if info is not None:
        assert info.resets_in is None or (math.isfinite(info.resets_in) and info.resets_in >= 0)
        assert_printable_json(info.to_json())
    for bucket in parse_usage(body, now=1e9):
        assert bucket.remaining is None or 0.0 <= bucket.remaining <= 1.0
        assert_printable_json(bucket.to_json())
        bucket.describe()
    result = body if isinstance(body, dict) else None
    outcome = exit_verdict(code, stderr=text, stdout=text, result=result, observed_at=1e9)
    assert isinstance(outcome.error, str) and (outcome.ok or outcome.error)


# -- glue for the counts ------------------------------------------------------------------------

TARGETS: dict[str, Callable[..., None]] = {
    name: obj for name, obj in list(globals().items()) if name.startswith("test_fuzz_")
}


def test_every_decoder_has_a_fuzz_target() -> None:
    names = set(TARGETS)
    for wanted in (
        "protobuf",
        "connect",
        "ndjson",
        "rpc_json",
        "stream_json",
        "rows",
        "replay",
        "jsontext",
        "quota",
    ):
        assert any(wanted in name for name in names), wanted
