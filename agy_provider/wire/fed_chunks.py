"""The input side every sans-I/O framer here shares: bytes kept in the chunks they were fed in.

Owns feeding, the bound on what a framer holds, and poisoning after a framing error.
"""

from __future__ import annotations

from collections import deque
from typing import NoReturn

from agy_provider.errors import FramingError
from agy_provider.errors import UsageError

__all__ = ["FedChunks", "failed_again"]


class FedChunks:
    """The bytes a sans-I/O framer was fed and has not consumed yet, in the chunks they came in.

    Holds the contract every framer here shares: `feed()` keeps a chunk (copying only a caller's
    reusable buffer), refuses to grow past `bound` plus `slack` bytes before a feed (a drained
    decoder holds at most one partial `unit`), and a framing error poisons the stream: `_fail`
    raises it and lets the memory go, and every later call raises `failed_again` at once.
    A subclass consumes `_chunks` from `_head_offset` on, keeping `_buffered` in step.
    """

    def __init__(self, *, bound: int, slack: int, unit: str) -> None:
        # Chunks as fed, oldest first; `_head_offset` is how much of `_chunks[0]` is consumed, so a
        # big chunk holding many small frames or lines is never re-sliced (quadratic otherwise).
        self._chunks: deque[bytes] = deque()
        self._head_offset = 0
        self._buffered = 0
        self._failure: FramingError | None = None
        self._input_ended = False
        self._bound = bound
        self._slack = slack
        self._unit = unit
        self.bytes_copied = 0

    def feed(self, data: bytes) -> None:
        """Add bytes from the wire. Raises the poisoning `FramingError` if the stream has failed.

        A decoder that is drained after every feed holds at most one partial unit, so holding more
        than the bound (plus its slack) before a feed means a caller is not draining it.
        """
        self._check_failed()
        if self._input_ended:
            raise UsageError("feed() after end_of_input()")
        if self._held() > self._bound + self._slack:
            self._fail(f"over {self._bound} bytes buffered without a complete {self._unit}")
        if not data:
            return
        if type(data) is not bytes:
            # A bytearray or memoryview may be reused by the caller's read loop: keep our own copy.
            data = bytes(data)
            self.bytes_copied += len(data)
        self._chunks.append(data)
        self._buffered += len(data)

    def _held(self) -> int:
        """Bytes held towards the unit being framed."""
        return self._buffered

    def _fail(self, message: str, offset: int | None = None) -> NoReturn:
        self._failure = FramingError(message, offset)
        self._chunks.clear()  # nothing more will be read: let the memory go
        self._buffered = 0
        raise self._failure

    def _check_failed(self) -> None:
        if self._failure is not None:
            raise failed_again(self._failure)


def failed_again(failure: FramingError) -> FramingError:
    """The error a poisoned stream raises on every call after `failure`: it names and chains it."""
    again = FramingError(f"stream already failed: {failure}")
    again.offset = failure.offset
    again.__cause__ = failure
    return again
