"""NDJSON line framing and JSON-object lines (agy_provider.wire.ndjson)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from codec_helpers import DEFAULT_GARBAGE
from codec_helpers import run_tail
from codec_helpers import run_three_ways
from codec_helpers import split_at
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import UsageError
from agy_provider.wire.ndjson import MAX_LINE_BYTES
from agy_provider.wire.ndjson import NEED_DATA
from agy_provider.wire.ndjson import JsonLineDecoder
from agy_provider.wire.ndjson import LineDecoder

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
CAPTURE = REFERENCE / "stream-json" / "agy-1.1.17-print-denied-command.ndjson"


# -- adapters for the shared three-ways runner ---------------------------------------------------


def feed_lines(decoder: LineDecoder, chunk: bytes) -> Iterator[bytes]:
    decoder.feed(chunk)
    yield from decoder.lines()


def finish_lines(decoder: LineDecoder) -> Iterator[bytes]:
    tail = decoder.end_of_input()
    if tail is not None:
        yield tail


def _pull_objects(decoder: JsonLineDecoder) -> Iterator[object]:
    while True:
        try:
            obj = decoder.next_object()
        except FramingError:
            raise
        except DecodeError as exc:
            yield ("skip", str(exc))
            continue
        if obj is NEED_DATA:
            return
        yield obj


def feed_objects(decoder: JsonLineDecoder, chunk: bytes) -> Iterator[object]:
    """Objects as dicts; a skippable bad line as ("skip", message) so runs compare equal."""
    decoder.feed(chunk)
    yield from _pull_objects(decoder)


def finish_objects(decoder: JsonLineDecoder) -> Iterator[object]:
    try:
        tail = decoder.end_of_input()
    except FramingError:
        raise
    except DecodeError as exc:
        yield ("skip", str(exc))
        return
    if tail is not None:
        yield tail


def lines_three_ways(data: bytes) -> list[bytes]:
    return run_three_ways(LineDecoder, feed_lines, finish_lines, data)


def objects_three_ways(data: bytes) -> list[object]:
    return run_three_ways(JsonLineDecoder, feed_objects, finish_objects, data)


# -- LineDecoder -----------------------------------------------------------------------------------


def test_lines_three_ways() -> None:
    data = b"one\ntwo\r\n\n   \r\nthree\n\xff\xfe binary\n"
    assert lines_three_ways(data) == [b"one", b"two", b"three", b"\xff\xfe binary"]


def test_empty_and_blank_inputs_yield_nothing() -> None:
    assert lines_three_ways(b"") == []
    assert lines_three_ways(b"\n\r\n \t\n") == []
    assert lines_three_ways(b"\n\n  ") == []


def test_trailing_garbage_becomes_one_more_line() -> None:
    decoder = LineDecoder()
    decoder.feed(b"a\n" + DEFAULT_GARBAGE)
    assert list(decoder.lines()) == [b"a"]
    assert decoder.end_of_input() == DEFAULT_GARBAGE


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"a\nlast", [b"a", b"last"], id="no-newline"),
        pytest.param(b"a\nlast\r", [b"a", b"last"], id="cut-between-cr-and-lf"),
        pytest.param(b"a\n", [b"a"], id="clean"),
        pytest.param(b"a\n   ", [b"a"], id="blank-tail"),
        pytest.param(b"only", [b"only"], id="single-unterminated-line"),
        pytest.param(b"x\r", [b"x"], id="single-cr"),
    ],
)
def test_tail_without_newline_is_flushed(data: bytes, expected: list[bytes]) -> None:
    splits = [[data[:1], data[1:]], [data[:-1], data[-1:]]]
    assert run_tail(LineDecoder, feed_lines, finish_lines, data, splits=splits) == expected


def test_crlf_split_across_feeds() -> None:
    decoder = LineDecoder()
    for chunk in (b"abc\r", b"\ndef\r", b"\r\n"):
        decoder.feed(chunk)
    assert list(decoder.lines()) == [b"abc", b"def\r"]  # only one \r belongs to the line ending
    assert decoder.end_of_input() is None


def test_line_number_and_offset_count_blank_lines() -> None:
    decoder = LineDecoder()
    decoder.feed(b"ab\r\n\n  \ncd\n")
    assert decoder.next_line() == b"ab"
    assert (decoder.line_number, decoder.line_offset) == (1, 0)
    assert decoder.next_line() == b"cd"
    assert (decoder.line_number, decoder.line_offset) == (4, 8)
    decoder.feed(b"tail")
    assert decoder.next_line() is NEED_DATA
    assert decoder.end_of_input() == b"tail"
    assert (decoder.line_number, decoder.line_offset) == (5, 11)


def test_end_of_input_with_an_unpulled_line_is_misuse() -> None:
    decoder = LineDecoder()
    decoder.feed(b"x\n")
    with pytest.raises(UsageError):
        decoder.end_of_input()


def test_feed_after_end_of_input_is_misuse() -> None:
    decoder = LineDecoder()
    assert decoder.end_of_input() is None
    with pytest.raises(UsageError):
        decoder.feed(b"x")


def _assert_poisoned(decoder: LineDecoder) -> None:
    with pytest.raises(FramingError, match="already failed"):
        decoder.next_line()
    with pytest.raises(FramingError, match="already failed"):
        decoder.feed(b"fine\n")
    with pytest.raises(FramingError, match="already failed"):
        decoder.end_of_input()


def test_overlong_line_in_one_feed_poisons() -> None:
    decoder = LineDecoder()
    decoder.feed(b"ok\n" + b"x" * (MAX_LINE_BYTES + 1) + b"\nnext\n")
    assert decoder.next_line() == b"ok"
    with pytest.raises(FramingError, match="longer than") as info:
        decoder.next_line()
    assert info.value.offset == 3
    _assert_poisoned(decoder)


def test_overlong_line_over_many_feeds_fails_before_its_newline() -> None:
    decoder = LineDecoder()
    chunk = b"y" * (1024 * 1024)
    with pytest.raises(FramingError, match="longer than"):
        for _ in range(MAX_LINE_BYTES // len(chunk) + 1):
            decoder.feed(chunk)
            assert decoder.next_line() is NEED_DATA
    _assert_poisoned(decoder)


def test_line_of_exactly_the_bound_is_accepted() -> None:
    decoder = LineDecoder()
    decoder.feed(b"z" * MAX_LINE_BYTES + b"\r\n")
    line = decoder.next_line()
    assert isinstance(line, bytes) and len(line) == MAX_LINE_BYTES


def test_undrained_buffer_is_bounded() -> None:
    decoder = LineDecoder()
    chunk = b"a\n" * (MAX_LINE_BYTES // 8)
    with pytest.raises(FramingError, match="buffered"):
        for _ in range(6):
            decoder.feed(chunk)


def test_fed_bytearray_is_copied_not_aliased() -> None:
    buffer = bytearray(b"hello\n")
    decoder = LineDecoder()
    decoder.feed(buffer)  # type: ignore[arg-type]  # read loops hand us reused bytearrays
    buffer[:5] = b"XXXXX"
    assert decoder.next_line() == b"hello"


def test_long_line_in_small_feeds_is_copied_once() -> None:
    def copied(size: int) -> int:
        decoder = LineDecoder()
        data = b"q" * size + b"\n"
        for start in range(0, len(data), 4096):
            decoder.feed(data[start : start + 4096])
            for line in decoder.lines():
                assert len(line) == size
        assert decoder.end_of_input() is None
        return decoder.bytes_copied

    mib = 1024 * 1024
    assert copied(2 * mib) == 2 * mib
    assert copied(8 * mib) == 8 * mib


def test_many_short_lines_in_one_big_feed_are_not_resliced() -> None:
    data = b'{"event":"x"}\n' * 50_000
    decoder = LineDecoder()
    decoder.feed(data)
    assert sum(1 for _ in decoder.lines()) == 50_000
    assert decoder.bytes_copied == len(data) - 50_000  # every byte but the newlines, once


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=15),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=1200), max_size=25),
)
def test_any_split_decodes_the_same_lines(
    lines: list[bytes], crlf: bool, final_newline: bool, cuts: list[int]
) -> None:
    # A line's own trailing \r would merge into a CRLF ending; blank lines are skipped by design.
    lines = [line.rstrip(b"\r") for line in lines]
    expected = [line for line in lines if line.strip()]
    ending = b"\r\n" if crlf else b"\n"
    data = ending.join(lines) + (ending if final_newline and lines else b"")
    decoder = LineDecoder()
    got: list[bytes] = []
    for chunk in split_at(data, cuts):
        decoder.feed(chunk)
        got.extend(decoder.lines())
    tail = decoder.end_of_input()
    if tail is not None:
        got.append(tail)
    assert got == expected
    assert decoder.bytes_copied <= len(data)


# -- JsonLineDecoder -------------------------------------------------------------------------------


def test_objects_three_ways() -> None:
    data = b'{"event":"init"}\r\n\n{"event":"result","n":[1,2]}\n{"event":"tail"}'
    assert objects_three_ways(data) == [
        {"event": "init"},
        {"event": "result", "n": [1, 2]},
        {"event": "tail"},
    ]


def test_bad_lines_are_skipped_with_their_line_number() -> None:
    data = b'{"n":1}\nnot json\n\n[1,2]\n\xff\xfe{}\n"text"\n' + b"[" * 50_000 + b'\n{"n":2}\n'
    values = objects_three_ways(data)
    assert values[0] == {"n": 1}
    assert values[-1] == {"n": 2}
    skips = [str(v) for v in values[1:-1]]
    assert len(skips) == 5
    assert "line 2 is not valid JSON" in skips[0] and "(at byte 8)" in skips[0]
    assert "line 4 is JSON list, not an object" in skips[1]
    assert "line 5 is not valid JSON" in skips[2]
    assert "line 6 is JSON str, not an object" in skips[3]
    assert "line 7 is not valid JSON" in skips[4]


def test_decode_error_does_not_poison() -> None:
    decoder = JsonLineDecoder()
    decoder.feed(b'oops\n{"ok":true}\n')
    with pytest.raises(DecodeError) as info:
        decoder.next_object()
    assert not isinstance(info.value, FramingError)
    assert decoder.next_object() == {"ok": True}
    assert decoder.next_object() is NEED_DATA
    assert decoder.end_of_input() is None


def test_bad_tail_line_raises_decode_error_at_end_of_input() -> None:
    decoder = JsonLineDecoder()
    decoder.feed(b'{"a":1}\n{"b":')
    assert list(decoder.objects()) == [{"a": 1}]
    with pytest.raises(DecodeError, match="line 2"):
        decoder.end_of_input()


def test_json_tail_without_newline_is_flushed() -> None:
    data = b'{"a":1}\n{"event":"result"}'
    values = run_tail(JsonLineDecoder, feed_objects, finish_objects, data)
    assert values == [{"a": 1}, {"event": "result"}]


def test_json_framing_error_poisons() -> None:
    decoder = JsonLineDecoder()
    decoder.feed(b"x" * (MAX_LINE_BYTES + 1) + b"\n")
    with pytest.raises(FramingError):
        decoder.next_object()
    with pytest.raises(FramingError):
        decoder.next_object()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=5,
)


@settings(max_examples=100, deadline=None)
@given(
    objects=st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=3), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=1500), max_size=20),
)
def test_any_split_decodes_the_same_objects(objects: list[dict[str, Any]], cuts: list[int]) -> None:
    # Non-ASCII text goes out as raw UTF-8, so splits also land inside multi-byte characters.
    data = b"".join(json.dumps(o, ensure_ascii=False).encode() + b"\n" for o in objects)
    decoder = JsonLineDecoder()
    got: list[dict[str, Any]] = []
    for chunk in split_at(data, cuts):
        decoder.feed(chunk)
        got.extend(decoder.objects())
    assert decoder.end_of_input() is None
    assert got == objects


@pytest.mark.skipif(not CAPTURE.is_file(), reason="../shared/reference absent")
def test_real_stream_json_capture_three_ways() -> None:
    data = CAPTURE.read_bytes()
    events = objects_three_ways(data)
    assert events and all(isinstance(e, dict) for e in events)
    assert events[0]["event"] == "init"  # type: ignore[index]
    assert events[-1]["event"] == "result"  # type: ignore[index]
    # Same capture with CRLF endings and no final newline decodes the same.
    crlf = data.rstrip(b"\n").replace(b"\n", b"\r\n")
    assert objects_three_ways(crlf) == events
