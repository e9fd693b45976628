"""Connect envelopes, server streams and unary error bodies (agy_provider.wire.connect)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from codec_helpers import run_tail
from codec_helpers import run_three_ways
from codec_helpers import split_at
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import RpcError
from agy_provider.errors import UsageError
from agy_provider.wire.connect import CONNECT_PROTOCOL_VERSION
from agy_provider.wire.connect import CONTENT_TYPE_CONNECT_JSON
from agy_provider.wire.connect import CONTENT_TYPE_JSON
from agy_provider.wire.connect import FLAG_COMPRESSED
from agy_provider.wire.connect import FLAG_END_STREAM
from agy_provider.wire.connect import HEADER_BYTES
from agy_provider.wire.connect import MAX_FRAME_BYTES
from agy_provider.wire.connect import NEED_DATA
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import EnvelopeDecoder
from agy_provider.wire.connect import Frame
from agy_provider.wire.connect import SkippedFrame
from agy_provider.wire.connect import code_from_http_status
from agy_provider.wire.connect import encode_envelope
from agy_provider.wire.connect import encode_json_envelope
from agy_provider.wire.connect import parse_error_body

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


# -- adapters for the shared three-ways runner ---------------------------------------------------


def feed_frames(decoder: EnvelopeDecoder, chunk: bytes) -> Iterator[Frame]:
    decoder.feed(chunk)
    yield from decoder.frames()


def finish_frames(decoder: EnvelopeDecoder) -> Iterator[Frame]:
    decoder.end_of_input()
    yield from ()


def feed_stream(decoder: ConnectStreamDecoder, chunk: bytes) -> Iterator[object]:
    """Messages as dicts; a skippable bad frame as ("skip", message) so runs compare equal."""
    decoder.feed(chunk)
    while True:
        try:
            message = decoder.next_message()
        except FramingError:
            raise
        except DecodeError as exc:
            yield ("skip", str(exc))
            continue
        if message is NEED_DATA:
            return
        yield message


def finish_stream(decoder: ConnectStreamDecoder) -> Iterator[object]:
    decoder.end_of_input()
    yield ("ended", decoder.ended)


def frames_three_ways(data: bytes) -> list[Frame]:
    return run_three_ways(
        EnvelopeDecoder, feed_frames, finish_frames, data, garbage_raises=FramingError
    )


def stream_three_ways(data: bytes) -> list[object]:
    return run_three_ways(
        ConnectStreamDecoder, feed_stream, finish_stream, data, garbage_raises=FramingError
    )


def header(flags: int, length: int) -> bytes:
    return struct.pack(">BI", flags, length)


END_OK = encode_json_envelope({}, end_stream=True)


# -- encoding -------------------------------------------------------------------------------------


def test_constants_match_the_field_guide() -> None:
    assert CONNECT_PROTOCOL_VERSION == "1"
    assert CONTENT_TYPE_JSON == "application/json"
    assert CONTENT_TYPE_CONNECT_JSON == "application/connect+json"
    assert (FLAG_COMPRESSED, FLAG_END_STREAM) == (0x01, 0x02)


def test_encode_envelope_layout() -> None:
    assert encode_envelope(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert encode_envelope(b"", end_stream=True) == b"\x02\x00\x00\x00\x00"
    big = b"x" * 70_000
    assert encode_envelope(big)[:5] == b"\x00\x00\x01\x11\x70"


def test_encode_json_envelope_is_compact_utf8() -> None:
    data = encode_json_envelope({"conversationId": "é", "n": [1, 2]})
    assert data[5:] == '{"conversationId":"é","n":[1,2]}'.encode()
    assert data[1:5] == len(data[5:]).to_bytes(4, "big")
    assert encode_json_envelope({}, end_stream=True) == b"\x02\x00\x00\x00\x02{}"


def test_encode_json_envelope_refuses_nan() -> None:
    with pytest.raises(ValueError):
        encode_json_envelope({"x": float("nan")})


def test_encode_envelope_refuses_what_we_would_not_read() -> None:
    with pytest.raises(UsageError):
        encode_envelope(bytes(MAX_FRAME_BYTES + 1))


# -- EnvelopeDecoder -----------------------------------------------------------------------------


def test_frames_three_ways() -> None:
    data = (
        encode_envelope(b'{"a":1}')
        + encode_envelope(b"")
        + encode_envelope(b"x" * 300)
        + encode_envelope(b"{}", end_stream=True)
    )
    frames = frames_three_ways(data)
    assert [f.payload for f in frames] == [b'{"a":1}', b"", b"x" * 300, b"{}"]
    assert [f.is_end_stream for f in frames] == [False, False, False, True]
    assert [f.offset for f in frames] == [0, 12, 17, 322]


def test_empty_input_is_a_clean_end() -> None:
    assert frames_three_ways(b"") == []


def test_several_frames_in_one_feed_and_one_frame_over_many_feeds() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(encode_envelope(b"one") + encode_envelope(b"two") + encode_envelope(b"thr")[:6])
    assert [f.payload for f in decoder.frames()] == [b"one", b"two"]
    assert decoder.next_frame() is NEED_DATA
    decoder.feed(b"hr")
    assert decoder.next_frame() == Frame(0, b"thr")
    decoder.end_of_input()


def test_frame_json() -> None:
    assert Frame(0, b'{"a": [1]}').json() == {"a": [1]}
    with pytest.raises(DecodeError):
        Frame(0, b"{nope").json()
    with pytest.raises(DecodeError):
        Frame(0, b"\xff{}").json()
    with pytest.raises(DecodeError):
        Frame(0, b"[" * 100_000).json()  # must not escape as RecursionError


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00", id="one-header-byte"),
        pytest.param(b"\x00\x00\x00", id="half-a-header"),
        pytest.param(header(0, 10), id="header-only"),
        pytest.param(header(0, 10) + b"12345", id="half-a-payload"),
        pytest.param(header(0, 10) + b"123456789", id="one-byte-short"),
    ],
)
def test_truncated_tail_raises_at_end_of_input(tail: bytes) -> None:
    complete = encode_envelope(b"done")
    frames = run_tail(
        EnvelopeDecoder, feed_frames, finish_frames, complete + tail, raises=FramingError
    )
    assert frames == [Frame(0, b"done")]


def test_every_cut_is_either_a_boundary_or_truncated() -> None:
    data = encode_envelope(b"first") + encode_envelope(b"{}", end_stream=True)
    boundaries = {0, 10, len(data)}
    for cut in range(len(data) + 1):
        prefix = data[:cut]
        if cut in boundaries:
            run_tail(EnvelopeDecoder, feed_frames, finish_frames, prefix)
        else:
            run_tail(EnvelopeDecoder, feed_frames, finish_frames, prefix, raises=FramingError)


def test_truncation_message_says_how_far_it_got() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(header(0, 10) + b"123")
    assert decoder.next_frame() is NEED_DATA
    with pytest.raises(FramingError, match="3 bytes into a 10-byte frame"):
        decoder.end_of_input()


def test_end_of_input_with_an_unpulled_frame_is_misuse() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(encode_envelope(b"x"))
    with pytest.raises(UsageError):
        decoder.end_of_input()


def test_feed_after_end_of_input_is_misuse() -> None:
    decoder = EnvelopeDecoder()
    decoder.end_of_input()
    with pytest.raises(UsageError):
        decoder.feed(b"\x00")


def _assert_poisoned(decoder: EnvelopeDecoder) -> None:
    with pytest.raises(FramingError, match="already failed"):
        decoder.next_frame()
    with pytest.raises(FramingError, match="already failed"):
        decoder.feed(encode_envelope(b"fine"))
    with pytest.raises(FramingError, match="already failed"):
        decoder.end_of_input()


def test_compressed_flag_is_rejected_and_poisons() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(encode_envelope(b"ok") + header(FLAG_COMPRESSED, 3) + b"abc")
    assert decoder.next_frame() == Frame(0, b"ok")
    with pytest.raises(FramingError, match="compressed") as info:
        decoder.next_frame()
    assert info.value.offset == 7
    _assert_poisoned(decoder)


@pytest.mark.parametrize("flags", [0x04, 0x08, 0x80, 0xFF, 0x06])
def test_unknown_flag_bits_are_rejected(flags: int) -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(header(flags, 0))
    with pytest.raises(FramingError):
        decoder.next_frame()
    _assert_poisoned(decoder)


def test_oversize_frame_is_rejected_from_its_header_before_buffering() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(header(0, MAX_FRAME_BYTES + 1))
    with pytest.raises(FramingError, match="declares"):
        decoder.next_frame()
    assert decoder.buffered == 0
    assert decoder.bytes_copied == 0
    _assert_poisoned(decoder)


def test_largest_allowed_declared_length_waits_for_data() -> None:
    decoder = EnvelopeDecoder()
    decoder.feed(header(0, MAX_FRAME_BYTES) + b"x")
    assert decoder.next_frame() is NEED_DATA


def test_undrained_buffer_is_bounded() -> None:
    decoder = EnvelopeDecoder()
    chunk = bytes(MAX_FRAME_BYTES // 4)
    with pytest.raises(FramingError, match="buffered"):
        for _ in range(6):
            decoder.feed(chunk)


def test_fed_bytearray_is_copied_not_aliased() -> None:
    buffer = bytearray(encode_envelope(b"hello"))
    decoder = EnvelopeDecoder()
    decoder.feed(buffer)  # type: ignore[arg-type]  # read loops hand us reused bytearrays
    buffer[5:] = b"XXXXX"
    assert decoder.next_frame() == Frame(0, b"hello")


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.tuples(st.binary(max_size=300), st.booleans()), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
)
def test_any_split_decodes_the_same_frames(
    frames: list[tuple[bytes, bool]], cuts: list[int]
) -> None:
    data = b"".join(encode_envelope(p, end_stream=end) for p, end in frames)
    decoder = EnvelopeDecoder()
    got: list[tuple[bytes, bool]] = []
    for chunk in split_at(data, cuts):
        decoder.feed(chunk)
        got.extend((f.payload, f.is_end_stream) for f in decoder.frames())
    decoder.end_of_input()
    assert got == frames
    assert decoder.bytes_copied <= len(data)


# -- copying stays linear (counted, never timed) --------------------------------------------------


def _feed_in_pieces(payload_size: int, piece: int) -> EnvelopeDecoder:
    data = encode_envelope(bytes(payload_size))
    decoder = EnvelopeDecoder()
    view = memoryview(data)
    frames: list[Frame] = []
    for start in range(0, len(data), piece):
        decoder.feed(bytes(view[start : start + piece]))
        frames.extend(decoder.frames())
    decoder.end_of_input()
    assert len(frames) == 1 and len(frames[0].payload) == payload_size
    return decoder


def test_big_frame_in_small_feeds_is_copied_once() -> None:
    mib = 1024 * 1024
    small = _feed_in_pieces(8 * mib, 4096)
    large = _feed_in_pieces(32 * mib, 4096)
    # The payload is joined once, plus the 5-byte header: linear, and nothing re-sliced.
    assert small.bytes_copied == 8 * mib + 5
    assert large.bytes_copied == 32 * mib + 5
    assert large.bytes_copied / small.bytes_copied < 4.01


def test_many_small_frames_in_one_big_feed_are_not_resliced() -> None:
    data = encode_envelope(b"abcdefgh") * 50_000
    decoder = EnvelopeDecoder()
    decoder.feed(data)
    assert sum(1 for _ in decoder.frames()) == 50_000
    assert decoder.bytes_copied == len(data)


def test_a_frame_that_is_exactly_one_read_is_not_copied() -> None:
    decoder = EnvelopeDecoder()
    payload = b"p" * 1000
    decoder.feed(header(0, len(payload)))
    decoder.feed(payload)
    (frame,) = decoder.frames()
    assert frame.payload is payload
    assert decoder.bytes_copied == 0  # the header was its own read, too


# -- ConnectStreamDecoder ------------------------------------------------------------------------


def test_stream_three_ways_with_clean_end() -> None:
    data = encode_json_envelope({"update": {"n": 1}}) + encode_json_envelope({"n": 2}) + END_OK
    assert stream_three_ways(data) == [{"update": {"n": 1}}, {"n": 2}, ("ended", True)]


def test_stream_ended_flag_and_need_data_after_the_end() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_json_envelope({"n": 1}))
    assert decoder.next_message() == {"n": 1}
    assert not decoder.ended
    decoder.feed(END_OK)
    assert decoder.next_message() is NEED_DATA
    assert decoder.ended and decoder.error is None
    assert decoder.next_message() is NEED_DATA
    decoder.feed(b"")
    decoder.end_of_input()


def test_end_stream_error_raises_rpc_error() -> None:
    trailer = {"error": {"code": "internal", "message": "trajectory not found"}}
    payload = json.dumps(trailer).encode()
    data = encode_json_envelope({"n": 1}) + encode_envelope(payload, end_stream=True)
    decoder = ConnectStreamDecoder()
    decoder.feed(data)
    assert decoder.next_message() == {"n": 1}
    with pytest.raises(RpcError) as info:
        decoder.next_message()
    assert (info.value.code, info.value.message, info.value.body) == (
        "internal",
        "trajectory not found",
        payload,
    )
    assert decoder.error is info.value
    assert not decoder.ended
    for later in (decoder.next_message, decoder.end_of_input, lambda: decoder.feed(b"")):
        with pytest.raises(RpcError):
            later()


def test_end_stream_error_three_ways() -> None:
    data = encode_json_envelope({"n": 1}) + encode_json_envelope(
        {"error": {"code": "unavailable", "message": "x"}}, end_stream=True
    )
    values = run_tail(ConnectStreamDecoder, feed_stream, finish_stream, data, raises=RpcError)
    assert values == [{"n": 1}]


def test_error_trailer_wins_over_bytes_after_it() -> None:
    decoder = ConnectStreamDecoder()
    trailer = encode_json_envelope({"error": {"code": "internal", "message": "x"}}, end_stream=True)
    decoder.feed(trailer + b"junk")
    with pytest.raises(RpcError):
        decoder.next_message()


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ({"message": "no code"}, "unknown", "no code"),
        ({"code": "aborted"}, "aborted", ""),
        ("just a string", "unknown", "malformed end-of-stream error: 'just a string'"),
        ({"code": 7, "message": 8}, "unknown", ""),
    ],
)
def test_malformed_end_stream_errors_still_raise_rpc_error(
    error: object, code: str, message: str
) -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_json_envelope({"error": error}, end_stream=True))
    with pytest.raises(RpcError) as info:
        decoder.next_message()
    assert (info.value.code, info.value.message) == (code, message)


def test_end_stream_metadata_without_error_is_a_clean_end() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_json_envelope({"metadata": {"k": ["v"]}}, end_stream=True))
    assert decoder.next_message() is NEED_DATA
    assert decoder.ended


@pytest.mark.parametrize("payload", [b"", b"not json", b"[]", b"null"])
def test_unreadable_end_stream_frame_is_a_framing_error(payload: bytes) -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_envelope(payload, end_stream=True))
    with pytest.raises(FramingError):
        decoder.next_message()
    with pytest.raises(FramingError):
        decoder.next_message()


def test_frame_after_end_stream_in_the_same_read() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(END_OK + encode_json_envelope({"late": True}))
    with pytest.raises(FramingError, match="after the end-of-stream"):
        decoder.next_message()
    with pytest.raises(FramingError, match="already failed"):
        decoder.next_message()


def test_frame_after_end_stream_in_a_later_read() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(END_OK)
    assert decoder.next_message() is NEED_DATA
    with pytest.raises(FramingError, match="after the end-of-stream"):
        decoder.feed(encode_json_envelope({"late": True}))
    with pytest.raises(FramingError):
        decoder.end_of_input()


def test_frame_after_end_stream_three_ways() -> None:
    data = encode_json_envelope({"n": 1}) + END_OK + encode_json_envelope({"n": 2})
    values = run_tail(ConnectStreamDecoder, feed_stream, finish_stream, data, raises=FramingError)
    assert values == [{"n": 1}]


def test_invalid_json_frame_is_skipped_and_the_next_frame_decodes() -> None:
    data = (
        encode_json_envelope({"n": 1})
        + encode_envelope(b"{broken")
        + encode_envelope(b"[1, 2]")
        + encode_envelope(b"\xff\xfe")
        + encode_json_envelope({"n": 2})
        + END_OK
    )
    values = stream_three_ways(data)
    assert values[0] == {"n": 1}
    skips = values[1:4]
    assert all(isinstance(v, tuple) and v[0] == "skip" for v in skips)
    assert "not valid JSON" in str(skips[0]) and "(at byte 12)" in str(skips[0])
    assert "frame 3 is JSON list, not an object" in str(skips[1])
    assert values[4:] == [{"n": 2}, ("ended", True)]


def test_decode_error_is_not_a_framing_error_and_does_not_poison() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(encode_envelope(b"oops") + encode_json_envelope({"ok": 1}))
    with pytest.raises(DecodeError) as info:
        decoder.next_message()
    assert not isinstance(info.value, FramingError)
    assert decoder.next_message() == {"ok": 1}


def test_stream_without_end_frame_is_truncated() -> None:
    data = encode_json_envelope({"n": 1})
    values = run_tail(ConnectStreamDecoder, feed_stream, finish_stream, data, raises=FramingError)
    assert values == [{"n": 1}]


def test_stream_cut_inside_a_frame_is_truncated() -> None:
    data = encode_json_envelope({"n": 1}) + END_OK[:3]
    run_tail(ConnectStreamDecoder, feed_stream, finish_stream, data, raises=FramingError)


def test_stream_framing_errors_poison() -> None:
    decoder = ConnectStreamDecoder()
    decoder.feed(header(FLAG_COMPRESSED, 2) + b"{}")
    with pytest.raises(FramingError, match="compressed"):
        decoder.next_message()
    for later in (decoder.next_message, decoder.end_of_input, lambda: decoder.feed(b"x")):
        with pytest.raises(FramingError):
            later()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=5,
)


@settings(max_examples=100, deadline=None)
@given(
    messages=st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=3), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_stream_any_split_decodes_the_same_messages(
    messages: list[dict[str, Any]], cuts: list[int]
) -> None:
    data = b"".join(encode_json_envelope(m) for m in messages) + END_OK
    decoder = ConnectStreamDecoder()
    got: list[Any] = []
    for chunk in split_at(data, cuts):
        decoder.feed(chunk)
        got.extend(decoder.messages())
    decoder.end_of_input()
    assert got == messages and decoder.ended


@pytest.mark.skipif(not (REFERENCE / "rpc-steps").is_dir(), reason="../shared/reference absent")
def test_real_stream_steps_round_trip_through_frames() -> None:
    steps = [
        json.loads(path.read_text())
        for path in sorted((REFERENCE / "rpc-steps").glob("stream_*.json"))
    ]
    assert steps
    updates = [
        {"update": {"mainTrajectoryUpdate": {"stepsUpdate": {"indices": [i], "steps": [step]}}}}
        for i, step in enumerate(steps)
    ]
    data = b"".join(encode_json_envelope(u) for u in updates) + END_OK
    assert stream_three_ways(data) == [*updates, ("ended", True)]


# -- unary errors ---------------------------------------------------------------------------------


def test_connect_json_error_body() -> None:
    body = b'{"code":"unauthenticated","message":"missing CSRF token"}'
    error = parse_error_body(401, body)
    assert (error.code, error.message, error.status, error.body) == (
        "unauthenticated",
        "missing CSRF token",
        401,
        body,
    )


def test_plain_text_500_keeps_its_text() -> None:
    error = parse_error_body(500, b"trajectory not found\n")
    assert (error.code, error.message, error.status) == ("unknown", "trajectory not found", 500)
    assert error.body == b"trajectory not found\n"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "internal"),
        (401, "unauthenticated"),
        (403, "permission_denied"),
        (404, "unimplemented"),
        (429, "unavailable"),
        (502, "unavailable"),
        (503, "unavailable"),
        (504, "unavailable"),
        (408, "unknown"),
        (409, "unknown"),
        (500, "unknown"),
        (418, "unknown"),
    ],
)
def test_http_status_to_code_follows_the_connect_table(status: int, code: str) -> None:
    assert code_from_http_status(status) == code
    assert parse_error_body(status, b"some text").code == code


@pytest.mark.parametrize(
    "body",
    [b"", b"   ", b"[1]", b'{"message":"no code"}', b'{"code":""}', b"\xff\xfe", b"[" * 50_000],
)
def test_bodies_without_a_connect_code_fall_back_to_the_status(body: bytes) -> None:
    error = parse_error_body(503, body)
    assert error.code == "unavailable"
    assert error.body == body
    assert error.message


def test_empty_body_message_names_the_status() -> None:
    assert parse_error_body(503, b"").message == "HTTP 503"


# -- a first frame too large to be worth parsing ------------------------------------------------


def test_a_large_first_frame_is_skipped_unparsed_and_later_ones_are_parsed() -> None:
    replay = {"update": {"steps": ["x" * 5000]}}
    later = {"update": {"steps": ["y" * 5000]}}
    data = encode_json_envelope(replay) + encode_json_envelope(later) + END_OK
    for cuts in ([], [3, 4000, 5005, len(data) - 2]):
        decoder = ConnectStreamDecoder(skip_first_over=1000)
        got: list[Any] = []
        for chunk in split_at(data, cuts):
            decoder.feed(chunk)
            got.extend(decoder.messages())
        decoder.end_of_input()
        first_size = len(encode_json_envelope(replay)) - HEADER_BYTES
        assert got == [SkippedFrame(first_size), later] and decoder.ended


@pytest.mark.parametrize("limit", [None, 1_000_000])
def test_a_first_frame_within_the_limit_or_without_one_is_parsed(limit: int | None) -> None:
    replay = {"update": {"steps": ["x" * 5000]}}
    decoder = ConnectStreamDecoder(skip_first_over=limit)
    decoder.feed(encode_json_envelope(replay) + END_OK)
    assert list(decoder.messages()) == [replay]


def test_an_error_end_as_the_first_frame_is_never_skipped() -> None:
    decoder = ConnectStreamDecoder(skip_first_over=0)
    decoder.feed(encode_envelope(b'{"error": {"code": "unavailable", "message": "gone"}}', end_stream=True))
    with pytest.raises(RpcError, match="gone"):
        list(decoder.messages())
