"""Sans-I/O Connect protocol framing: envelopes, server-stream bodies and unary error bodies.

Owns the bytes of agy's Connect RPC (field guide §4.1, §4.4); no sockets, no httpx, no clock.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final
from typing import NoReturn
from typing import ParamSpec
from typing import TypeVar

from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import RpcError
from agy_provider.errors import UsageError
from agy_provider.wire import jsontext
from agy_provider.wire.fed_chunks import FedChunks
from agy_provider.wire.fed_chunks import failed_again
from agy_provider.wire.growing_json import GrowingJson

__all__ = [
    "CONNECT_PROTOCOL_VERSION",
    "CONTENT_TYPE_CONNECT_JSON",
    "CONTENT_TYPE_JSON",
    "FLAG_COMPRESSED",
    "FLAG_END_STREAM",
    "HEADER_BYTES",
    "MAX_FRAME_BYTES",
    "NEED_DATA",
    "ConnectStreamDecoder",
    "EnvelopeDecoder",
    "Frame",
    "NeedData",
    "SkippedFrame",
    "code_from_http_status",
    "encode_envelope",
    "encode_json_envelope",
    "parse_error_body",
]

CONNECT_PROTOCOL_VERSION: Final = "1"
CONTENT_TYPE_JSON: Final = "application/json"
CONTENT_TYPE_CONNECT_JSON: Final = "application/connect+json"

FLAG_COMPRESSED: Final = 0x01
FLAG_END_STREAM: Final = 0x02
_KNOWN_FLAGS: Final = FLAG_COMPRESSED | FLAG_END_STREAM

HEADER_BYTES: Final = 5
_HEADER: Final = struct.Struct(">BI")

# The first frame of StreamAgentStateUpdates replays every earlier step of the conversation in one
# JSON message, tool outputs included, so a long session legitimately sends frames of several MB
# (gRPC's usual 4 MiB receive limit would be too small). 64 MiB leaves an order of magnitude of
# headroom over that while refusing a corrupt length (up to 4 GiB) before we try to buffer it.
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024


class NeedData(enum.Enum):
    """Type of `NEED_DATA`: no complete value until more bytes arrive (shared by `ndjson`)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True)
class SkippedFrame:
    """The first data frame of a stream, left unparsed because it was larger than asked for.

    agy's first update frame replays every earlier step of the conversation: megabytes for a
    long one. A reader that takes a snapshot after it anyway loses nothing by not parsing it.
    """

    size: int

_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Frame:
    """One Connect envelope: its flag byte and its (uncompressed) payload.

    `offset` is where the frame's header started in the stream, for error messages; it takes no
    part in equality.
    """

    flags: int
    payload: bytes
    offset: int | None = field(default=None, compare=False)

    @property
    def is_end_stream(self) -> bool:
        """True for the end-of-stream frame, whose JSON is `{}` or `{"error": {...}}`."""
        return bool(self.flags & FLAG_END_STREAM)

    def json(self) -> Any:
        """Parse the payload as UTF-8 JSON.

        Raises:
            DecodeError: the payload is not UTF-8 or not JSON (or nests too deeply to parse).
        """
        return _loads(self.payload, "frame", self.offset)


def _loads(data: bytes, what: str, offset: int | None) -> Any:
    # Strict: no NaN/Infinity/1e400, no lone surrogates, bounded nesting (see jsontext).
    return jsontext.loads(data, what, offset)


def encode_envelope(payload: bytes, *, end_stream: bool = False) -> bytes:
    """Frame `payload` as one Connect envelope (flag 0x02 when `end_stream`).

    Raises:
        UsageError: the payload is longer than `MAX_FRAME_BYTES`, which no peer of ours reads.
    """
    if len(payload) > MAX_FRAME_BYTES:
        raise UsageError(f"envelope payload of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    flags = FLAG_END_STREAM if end_stream else 0
    return b"".join((_HEADER.pack(flags, len(payload)), payload))


def encode_json_envelope(obj: object, *, end_stream: bool = False) -> bytes:
    """Frame `obj` as compact UTF-8 JSON in one Connect envelope.

    Raises:
        TypeError, ValueError: `obj` is not JSON-serializable (NaN and infinities included).
    """
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return encode_envelope(text.encode("utf-8"), end_stream=end_stream)


class EnvelopeDecoder(FedChunks):
    """Turns a byte stream of `[flags][4-byte big-endian length][payload]` envelopes into `Frame`s.

    Feed bytes with `feed()`, pull frames with `next_frame()` (or `frames()`) until `NEED_DATA`,
    and call `end_of_input()` when the body ends. Incoming chunks are kept as they arrived and a
    frame's payload is joined from them once, when it is complete, so a 32 MiB frame arriving in
    4 KiB reads costs one copy, not thousands. `bytes_copied` counts every byte copied out of the
    fed chunks, so tests can check that cost stays linear. A framing error poisons the decoder:
    every later call raises `FramingError` at once.
    """

    def __init__(self) -> None:
        # At most one partial frame and the header after it.
        super().__init__(bound=MAX_FRAME_BYTES, slack=HEADER_BYTES, unit="frame")
        self._consumed = 0  # stream offset of the first buffered byte
        self._header: tuple[int, int, int] | None = None  # (flags, length, offset) once read

    @property
    def consumed(self) -> int:
        """Stream offset of the first byte not yet returned."""
        return self._consumed

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet returned in a frame (a header already parsed is not counted)."""
        return self._buffered

    def next_frame(self) -> Frame | NeedData:
        """Return the next complete frame, or `NEED_DATA` until enough bytes have arrived.

        Raises:
            FramingError: a compressed or unknown flag, or a declared length over
                `MAX_FRAME_BYTES` (raised from the header alone, before any payload is buffered).
                The decoder is poisoned from then on.
        """
        self._check_failed()
        if self._header is None:
            if self._buffered < HEADER_BYTES:
                return NEED_DATA
            offset = self._consumed
            flags, length = _HEADER.unpack(self._take(HEADER_BYTES))
            if flags & FLAG_COMPRESSED:
                self._fail("compressed frame (flag 0x01): agy never compresses", offset)
            if flags & ~_KNOWN_FLAGS:
                self._fail(f"unknown frame flags 0x{flags:02x}", offset)
            if length > MAX_FRAME_BYTES:
                self._fail(f"frame declares {length} bytes, over {MAX_FRAME_BYTES}", offset)
            self._header = (flags, length, offset)
        flags, length, offset = self._header
        if self._buffered < length:
            return NEED_DATA
        self._header = None
        return Frame(flags, self._take(length), offset)

    def completes_frame(self, data: bytes) -> bool:
        """Whether feeding `data` may make a frame complete: False only when the next frame's
        header is known (buffered, or at the start of `data`) and its payload would still be
        short. Lets a caller that parses big frames elsewhere (a worker thread) feed the pieces
        before the last where it is, for the price of a deque append."""
        header = self._header
        if header is not None:
            return self._buffered + len(data) >= header[1]
        if self._buffered == 0 and len(data) >= HEADER_BYTES:
            length: int = _HEADER.unpack_from(data)[1]
            return len(data) - HEADER_BYTES >= length
        return True

    def frames(self) -> Iterator[Frame]:
        """Yield every complete frame buffered so far; stops at `NEED_DATA`."""
        while (frame := self.next_frame()) is not NEED_DATA:
            yield frame

    def end_of_input(self) -> None:
        """Declare the body finished; drain `frames()` first.

        Raises:
            FramingError: the input ended inside a frame (a half header or a half payload).
            UsageError: a complete frame is still buffered; pull it before ending the input.
        """
        self._check_failed()
        self._input_ended = True
        if self._header is None and not self._buffered:
            return
        # next_frame() reads and validates a buffered header, so the error below can be precise.
        if self.next_frame() is not NEED_DATA:
            raise UsageError("end_of_input() with a complete frame not yet pulled")
        if self._header is not None:
            _, length, offset = self._header
            self._fail(f"input ended {self._buffered} bytes into a {length}-byte frame", offset)
        self._fail(
            f"input ended inside a frame header ({self._buffered} of {HEADER_BYTES} bytes)",
            self._consumed,
        )

    def _take(self, n: int) -> bytes:
        """Remove and return the next `n` buffered bytes (`n <= self._buffered`)."""
        if not n:
            return b""
        self._buffered -= n
        self._consumed += n
        chunks = self._chunks
        head = chunks[0]
        start = self._head_offset
        available = len(head) - start
        if start == 0 and n == available:
            chunks.popleft()
            return head  # a frame that arrived in exactly one read: no copy at all
        self.bytes_copied += n
        if n < available:
            self._head_offset = start + n
            return head[start : start + n]
        # The frame spans chunks: gather memoryviews and copy once, in join.
        parts: list[memoryview] = []
        remaining = n
        while remaining:
            head = chunks[0]
            available = len(head) - start
            if available <= remaining:
                parts.append(memoryview(head)[start:])
                chunks.popleft()
                remaining -= available
                start = 0
            else:
                parts.append(memoryview(head)[start : start + remaining])
                start += remaining
                remaining = 0
        self._head_offset = start
        return b"".join(parts)

class ConnectStreamDecoder:
    """Decodes a Connect server-stream body (`application/connect+json`) into JSON objects.

    `next_message()` returns each data frame's object, or `NEED_DATA`. The end-of-stream frame
    either ends the stream cleanly (`ended` becomes true and `next_message()` keeps returning
    `NEED_DATA`) or carries `{"error": {code, message}}`, which raises `RpcError` then and on
    every later call (`ended` stays false; `error` holds it). Any byte after the end-of-stream
    frame is a `FramingError`, and like every framing error it poisons the decoder. A data frame
    that is not a JSON object raises `DecodeError` once; call again to read the next frame.
    """

    def __init__(self, *, skip_first_over: int | None = None) -> None:
        self._frames = EnvelopeDecoder()
        self._error: RpcError | None = None
        self._failure: FramingError | None = None
        self._skip_first_over = skip_first_over
        # A growing step comes again in every frame, whole: parse only what grew (issue 31).
        self._json = GrowingJson()
        self.ended = False
        self.frames_read = 0

    @property
    def envelopes(self) -> EnvelopeDecoder:
        """The envelope layer underneath (for its counters)."""
        return self._frames

    @property
    def long_strings(self) -> GrowingJson:
        """The long strings remembered from the previous frame (for its counters)."""
        return self._json

    @property
    def error(self) -> RpcError | None:
        """The error the end-of-stream frame carried, once it has been read."""
        return self._error

    def feed(self, data: bytes) -> None:
        """Add bytes from the response body."""
        self._check_failed()
        if self.ended and data:
            self._fail("data after the end-of-stream frame", self._frames.consumed)
        self._guard(self._frames.feed, data)

    def next_message(self) -> dict[str, Any] | NeedData | SkippedFrame:
        """Return the next data frame's JSON object, or `NEED_DATA`.

        With `skip_first_over=N`, a first data frame of more than N bytes comes out as a
        `SkippedFrame` instead, unparsed.

        Raises:
            DecodeError: this data frame is not a JSON object (skippable: call again).
            RpcError: the end-of-stream frame reported an error.
            FramingError: the framing is broken or data followed the end of the stream.
        """
        self._check_failed()
        if self.ended:
            return NEED_DATA
        frame = self._guard(self._frames.next_frame)
        if frame is NEED_DATA:
            return NEED_DATA
        self.frames_read += 1
        if frame.is_end_stream:
            return self._end(frame)
        skip = self._skip_first_over
        if self.frames_read == 1 and skip is not None and len(frame.payload) > skip:
            return SkippedFrame(len(frame.payload))
        value = self._json.loads(frame.payload, f"frame {self.frames_read}", frame.offset)
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise DecodeError(
                f"frame {self.frames_read} is JSON {kind}, not an object", frame.offset
            )
        return value

    def messages(self) -> Iterator[dict[str, Any] | SkippedFrame]:
        """Yield every complete message buffered so far; stops at `NEED_DATA` or the end.

        An exception ends the iterator; after a `DecodeError` call `messages()` again to go on.
        """
        while (message := self.next_message()) is not NEED_DATA:
            yield message

    def end_of_input(self) -> None:
        """Declare the body finished; drain `messages()` first.

        Raises:
            RpcError: the stream ended with an error (again).
            FramingError: the body stopped inside a frame or before the end-of-stream frame.
        """
        self._check_failed()
        self._guard(self._frames.end_of_input)
        if not self.ended:
            self._fail("stream ended without an end-of-stream frame", self._frames.consumed)

    def _end(self, frame: Frame) -> NeedData:
        try:
            trailer = frame.json()
        except DecodeError as exc:
            self._fail(f"end-of-stream frame is not JSON: {exc}", frame.offset)
        if not isinstance(trailer, dict):
            self._fail("end-of-stream frame is not a JSON object", frame.offset)
        error = trailer.get("error")
        if error is None:
            if self._frames.buffered:
                self._fail("data after the end-of-stream frame", self._frames.consumed)
            self.ended = True
            return NEED_DATA
        # An error trailer wins over anything after it: it is what the server meant to say.
        code, message = "unknown", f"malformed end-of-stream error: {error!r}"
        if isinstance(error, dict):
            code = _text(error.get("code")) or "unknown"
            message = _text(error.get("message"))
        self._error = RpcError(code, message, body=frame.payload)
        raise self._error

    def _guard(self, call: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run a call into the envelope layer, remembering a framing failure as our own."""
        try:
            return call(*args, **kwargs)
        except FramingError as exc:
            self._failure = exc
            raise

    def _fail(self, message: str, offset: int | None = None) -> NoReturn:
        self._failure = FramingError(message, offset)
        raise self._failure

    def _check_failed(self) -> None:
        if self._error is not None:
            raise self._error
        if self._failure is not None:
            raise failed_again(self._failure)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


# Connect's "HTTP to Error Code" table (connectrpc.com/docs/protocol/#http-to-error-code), used
# when a unary error body carries no Connect code of its own. It follows gRPC's HTTP mapping;
# the older Connect table (400 invalid_argument, 408 deadline_exceeded, 409 aborted, …) is gone.
_CODE_FROM_HTTP_STATUS: Final[dict[int, str]] = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def code_from_http_status(status: int) -> str:
    """The Connect code a client infers from an HTTP status alone (`unknown` for the rest)."""
    return _CODE_FROM_HTTP_STATUS.get(status, "unknown")


def parse_error_body(status: int, body: bytes) -> RpcError:
    """Build the `RpcError` for a failed unary call from its HTTP status and raw body.

    A Connect JSON body `{"code", "message"}` gives the code and message. Anything else — agy
    answers plain-text 500s such as `trajectory not found` — gets the code Connect infers from
    the status and the body text as the message. The raw body is kept on the error either way.
    """
    try:
        parsed = jsontext.loads(body)
    except DecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str) and parsed["code"]:
        message = _text(parsed.get("message"))
        return RpcError(parsed["code"], message, status=status, body=body)
    text = body.decode("utf-8", errors="replace").strip() or f"HTTP {status}"
    return RpcError(code_from_http_status(status), text, status=status, body=body)
