"""Sans-I/O NDJSON framing: bytes in, lines and JSON objects out, bounded and skip-tolerant.

Owns the line layer of agy's stream-json output and input (field guide §2.1); no files, no pipes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from typing import Final
from typing import NoReturn

from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError
from agy_provider.wire import jsontext
from agy_provider.wire.connect import NEED_DATA
from agy_provider.wire.connect import NeedData
from agy_provider.wire.fed_chunks import FedChunks

__all__ = [
    "MAX_LINE_BYTES",
    "NEED_DATA",
    "JsonLineDecoder",
    "LineDecoder",
    "NeedData",
]

# One stream-json line is one event, and the largest is a step_update carrying one tool's output
# or a result carrying the whole answer: agy caps what it inlines (full outputs go to
# brain/<id>/.../output.txt), so real lines stay well under a megabyte. 16 MiB is far past any
# honest line and still small enough to hold, so hitting it means a runaway writer or a stream
# that is not NDJSON at all.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024

_NEWLINE: Final = 0x0A
_CR: Final = 0x0D


class LineDecoder(FedChunks):
    """Splits a byte stream into lines, whatever sizes the reads come in.

    Feed bytes with `feed()`, pull lines (without their `\\n` or `\\r\\n`) with `next_line()` or
    `lines()` until `NEED_DATA`, then call `end_of_input()` for the unterminated tail. Each chunk
    is scanned once and a line that spans chunks is joined once, so a long line arriving in many
    small reads stays linear; `bytes_copied` counts the bytes copied out of the fed chunks.
    `line_number` and `line_offset` describe the line scanned last, which is the line just
    returned by `next_line()` (1-based, counting blank lines; byte offset of its first byte).
    """

    def __init__(self) -> None:
        # At most one partial line and its `\r\n`: more means the line is too long or a caller is
        # not draining the decoder. `_chunks` holds what is not scanned yet.
        super().__init__(bound=MAX_LINE_BYTES, slack=2, unit="line")
        # The start of the current line, already scanned and known to hold no newline.
        self._partial: list[memoryview] = []
        self._partial_bytes = 0
        self._line_start = 0  # stream offset where the current line starts
        self.line_number = 0
        self.line_offset = 0

    def next_line(self) -> bytes | NeedData:
        """Return the next non-blank line without its line ending, or `NEED_DATA`.

        Raises:
            FramingError: a line is longer than `MAX_LINE_BYTES`; the decoder is poisoned.
        """
        self._check_failed()
        while self._chunks:
            line = self._scan()
            # NEED_DATA here only means one chunk moved into the partial line: scan the next.
            if line is not NEED_DATA and line and not line.isspace():
                return line
        return NEED_DATA

    def lines(self) -> Iterator[bytes]:
        """Yield every complete line buffered so far; stops at `NEED_DATA`."""
        while (line := self.next_line()) is not NEED_DATA:
            yield line

    def end_of_input(self) -> bytes | None:
        """Declare the input finished and return its last line if it had no newline.

        Returns `None` when the input ended with a newline or the tail is blank. Drain `lines()`
        first.

        Raises:
            UsageError: a complete line is still buffered; pull it before ending the input.
            FramingError: the decoder failed earlier, or the tail is longer than `MAX_LINE_BYTES`.
        """
        self._check_failed()
        self._input_ended = True
        if self.next_line() is not NEED_DATA:
            raise UsageError("end_of_input() with a complete line not yet pulled")
        if not self._partial_bytes:
            return None
        parts = self._partial
        consumed = self._partial_bytes
        if parts[-1][-1] == _CR:
            parts[-1] = parts[-1][:-1]
            self._partial_bytes -= 1
        if self._partial_bytes > MAX_LINE_BYTES:
            self._fail(f"line longer than {MAX_LINE_BYTES} bytes", self._line_start)
        tail = self._complete(b"".join(parts), consumed)
        if not tail or tail.isspace():
            return None
        return tail

    def _scan(self) -> bytes | NeedData:
        """Consume one line from the pending chunks, blank or not; `NEED_DATA` if none is whole."""
        head = self._chunks[0]
        start = self._head_offset
        end = head.find(b"\n", start)
        if end < 0:
            piece = memoryview(head)[start:]
            self._chunks.popleft()
            self._buffered -= len(piece)
            self._head_offset = 0
            self._partial.append(piece)
            self._partial_bytes += len(piece)
            # One byte of slack: a line of exactly the bound may still end in "\r\n".
            if self._partial_bytes > MAX_LINE_BYTES + 1:
                self._fail(f"line longer than {MAX_LINE_BYTES} bytes", self._line_start)
            return NEED_DATA
        self._buffered -= end + 1 - start
        if end + 1 == len(head):
            self._chunks.popleft()
            self._head_offset = 0
        else:
            self._head_offset = end + 1
        consumed = self._partial_bytes + end - start + 1
        # Drop a `\r` before the `\n`; it may be the last byte of an earlier chunk.
        if end > start and head[end - 1] == _CR:
            end -= 1
        elif end == start and self._partial and self._partial[-1][-1] == _CR:
            self._partial[-1] = self._partial[-1][:-1]
            self._partial_bytes -= 1
        if self._partial_bytes + end - start > MAX_LINE_BYTES:
            self._fail(f"line longer than {MAX_LINE_BYTES} bytes", self._line_start)
        if self._partial:
            self._partial.append(memoryview(head)[start:end])
            line = b"".join(self._partial)
        else:
            line = head[start:end]
        return self._complete(line, consumed)

    def _complete(self, line: bytes, consumed: int) -> bytes:
        """Account for a finished line that took `consumed` bytes of input."""
        self.bytes_copied += len(line)
        self.line_number += 1
        self.line_offset = self._line_start
        self._line_start += consumed
        self._partial = []
        self._partial_bytes = 0
        return line

    def _held(self) -> int:
        return self._buffered + self._partial_bytes

    def _fail(self, message: str, offset: int | None = None) -> NoReturn:
        self._partial = []  # nothing more will be read: let the memory go
        self._partial_bytes = 0
        super()._fail(message, offset)


class JsonLineDecoder:
    """Parses NDJSON into JSON objects, one per non-blank line.

    `next_object()` returns the next object or `NEED_DATA`; a line that is not valid UTF-8 JSON,
    or is JSON but not an object, raises `DecodeError` (message names the line number, `offset`
    its first byte) and is skipped: call again for the next line. Framing errors come from the
    `LineDecoder` underneath and poison the stream.
    """

    def __init__(self) -> None:
        self._lines = LineDecoder()

    @property
    def lines(self) -> LineDecoder:
        """The line layer underneath (for its line number and counters)."""
        return self._lines

    def feed(self, data: bytes) -> None:
        """Add bytes."""
        self._lines.feed(data)

    def next_object(self) -> dict[str, Any] | NeedData:
        """Return the next line's JSON object, or `NEED_DATA`.

        Raises:
            DecodeError: this line is not a JSON object (skippable: call again).
            FramingError: a line is too long; the stream is poisoned.
        """
        line = self._lines.next_line()
        if line is NEED_DATA:
            return NEED_DATA
        return self._parse(line)

    def objects(self) -> Iterator[dict[str, Any]]:
        """Yield every complete object buffered so far; stops at `NEED_DATA`.

        An exception ends the iterator; after a `DecodeError` call `objects()` again to go on.
        """
        while (obj := self.next_object()) is not NEED_DATA:
            yield obj

    def end_of_input(self) -> dict[str, Any] | None:
        """Declare the input finished; return the object on a last line without a newline.

        Raises:
            DecodeError: that last line is not a JSON object.
            UsageError, FramingError: as for `LineDecoder.end_of_input()`.
        """
        tail = self._lines.end_of_input()
        return None if tail is None else self._parse(tail)

    def _parse(self, line: bytes) -> dict[str, Any]:
        number, offset = self._lines.line_number, self._lines.line_offset
        # Strict: no NaN/Infinity/1e400, no lone surrogates, bounded nesting (see jsontext).
        value = jsontext.loads(line, f"line {number}", offset)
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise DecodeError(f"line {number} is JSON {kind}, not an object", offset)
        return value
