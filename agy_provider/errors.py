"""The exception tree of agy-provider: one root, three branches (decode, source, misuse).

Owns every exception type the package raises; foreign exceptions are translated where we call them.

    AgyError
    ├── DecodeError            bad bytes or JSON in one row, frame or line: skippable
    │   └── FramingError       a stream's framing is broken: that stream is poisoned
    ├── SourceError            an event source or transport failed: becomes the turn's `error` event
    │   ├── AgyNotFoundError   no agy binary could be found
    │   ├── RpcError           a Connect call failed (code, message, raw body)
    │   ├── DatabaseError      agy's SQLite database could not be read (path, row index)
    │   ├── TurnError          the turn itself failed (deadline, crash, binding)
    │   └── QuotaExceededError agy refused the turn for quota (resets_in, resets_at)
    └── misuse: also a ValueError or RuntimeError, so callers may catch either
        ├── UsageError (ValueError)               the caller passed something we cannot use
        └── IncompleteStreamError (RuntimeError)  a producer ended a stream with no done/error/result
"""

from __future__ import annotations

__all__ = [
    "AgyError",
    "AgyNotFoundError",
    "DatabaseError",
    "DecodeError",
    "FramingError",
    "IncompleteStreamError",
    "QuotaExceededError",
    "RpcError",
    "SourceError",
    "TurnError",
    "UsageError",
]


class AgyError(Exception):
    """Root of every exception agy-provider raises on purpose."""


class DecodeError(AgyError):
    """Input that does not decode. `offset` names where, when a byte offset is known."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"{message} (at byte {offset})")


class FramingError(DecodeError):
    """A stream's framing is broken; the stream cannot be read further."""


class SourceError(AgyError):
    """An event source or its transport failed; ends the turn with an `error` event."""


class AgyNotFoundError(SourceError):
    """No agy binary was found where we looked."""


class RpcError(SourceError):
    """A Connect RPC failed: `code` and `message` as agy said them, `body` raw."""

    def __init__(
        self, code: str, message: str, *, status: int | None = None, body: bytes = b""
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        super().__init__(f"{code}: {message}" if code else message)


class DatabaseError(SourceError):
    """agy's database could not be read."""

    def __init__(self, message: str, *, path: str, index: int | None = None) -> None:
        self.path = path
        self.index = index
        where = path if index is None else f"{path} row {index}"
        super().__init__(f"{message} ({where})")


class TurnError(SourceError):
    """The turn failed as a whole: a deadline, a crash, a database we could not bind."""


class QuotaExceededError(SourceError):
    """agy refused the turn for quota; the message is agy's own words, saying when it resets.

    `resets_in` is seconds from when agy said it, `resets_at` epoch seconds (either None when
    agy did not say or the time it said it is unknown); `code` is agy's status name
    (`RESOURCE_EXHAUSTED`) when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        resets_in: float | None = None,
        resets_at: float | None = None,
        code: str = "",
    ) -> None:
        self.message = message
        self.resets_in = resets_in
        self.resets_at = resets_at
        self.code = code
        super().__init__(message)


class UsageError(AgyError, ValueError):
    """The caller passed something we cannot use."""


class IncompleteStreamError(AgyError, RuntimeError):
    """The producer ended the stream without a `done` or `error` event or a result."""
