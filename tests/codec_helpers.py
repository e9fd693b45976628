"""Runs any feed-style codec three ways: whole, one byte at a time, and with trailing garbage.

Shared by the tests of every sans-I/O codec (Connect envelopes, NDJSON, the protobuf walker).

A codec is described by three callables, so nothing here knows any codec's API:

- `make()` returns a fresh codec;
- `feed(codec, chunk)` feeds one chunk and yields the values it can pull out now. Write it as a
  generator, so values pulled before an error are still counted; it may turn skippable per-item
  errors into values, e.g. `("skip", str(exc))`, so runs can be compared;
- `finish(codec)` declares end of input and yields whatever it flushes (often nothing).

`run_three_ways` checks that a stream split into single bytes decodes exactly like the same stream
in one piece, and that garbage after valid input never changes the values decoded before it.
`run_tail` feeds a (usually truncated) input and reports what `finish` did with the tail.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic
from typing import TypeVar

__all__ = [
    "DEFAULT_GARBAGE",
    "Outcome",
    "bytewise",
    "drive",
    "run_tail",
    "run_three_ways",
    "split_at",
]

C = TypeVar("C")
T = TypeVar("T")

# Bytes no codec of ours accepts as a valid continuation: a flag byte with unknown bits for Connect,
# invalid UTF-8 for JSON lines, a reserved wire type for protobuf; no newline, so a line framer sees
# one unterminated tail line.
DEFAULT_GARBAGE = b"\xff\xfe\x07\x00garbage{"

ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What a run produced: every value pulled out, and the exception that stopped it, if any."""

    values: list[T]
    error: BaseException | None

    def describe(self) -> str:
        return f"values={self.values!r} error={self.error!r}"


def bytewise(data: bytes) -> list[bytes]:
    """`data` as one-byte chunks."""
    return [data[i : i + 1] for i in range(len(data))]


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates and out-of-range values allowed)."""
    points = sorted({min(max(cut, 0), len(data)) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def drive(
    make: Callable[[], C],
    feed: Callable[[C, bytes], Iterable[T]],
    finish: Callable[[C], Iterable[T]],
    chunks: Iterable[bytes],
    *,
    end: bool = True,
) -> Outcome[T]:
    """Feed `chunks` to a fresh codec (then `finish` it unless `end` is false); never raises."""
    codec = make()
    values: list[T] = []
    try:
        # One value at a time, so the values pulled before an error are kept.
        for chunk in chunks:
            for value in feed(codec, chunk):
                values.append(value)
        if end:
            for value in finish(codec):
                values.append(value)
    except Exception as exc:  # the caller decides which errors were expected
        return Outcome(values, exc)
    return Outcome(values, None)


def _same(a: Outcome[T], b: Outcome[T]) -> bool:
    return a.values == b.values and type(a.error) is type(b.error)


def run_three_ways(
    make: Callable[[], C],
    feed: Callable[[C, bytes], Iterable[T]],
    finish: Callable[[C], Iterable[T]],
    data: bytes,
    *,
    garbage: bytes = DEFAULT_GARBAGE,
    garbage_raises: ErrorTypes | None = None,
) -> list[T]:
    """Decode valid `data` whole and byte by byte, then again with `garbage` after it.

    Both ways must succeed and give the same values, which are returned. With the garbage
    appended (fed whole and byte by byte, again with identical outcomes), the values `data` yields
    before `finish` must still come out first and unchanged; if `garbage_raises` is given the garbage
    must then raise one of those types (from a feed or from `finish`), otherwise it must not
    raise at all (a line framer, say, simply returns it as one more line).
    """
    whole = drive(make, feed, finish, [data])
    if whole.error is not None:
        raise AssertionError(f"valid input failed to decode whole: {whole.describe()}")
    one_by_one = drive(make, feed, finish, bytewise(data))
    assert _same(one_by_one, whole), (
        f"byte-at-a-time differs from whole:\n  whole: {whole.describe()}\n"
        f"  bytewise: {one_by_one.describe()}"
    )
    if garbage:
        dirty = drive(make, feed, finish, [data + garbage])
        dirty_bytewise = drive(make, feed, finish, bytewise(data + garbage))
        assert _same(dirty, dirty_bytewise), (
            f"garbage fed whole and byte-at-a-time differ:\n  whole: {dirty.describe()}\n"
            f"  bytewise: {dirty_bytewise.describe()}"
        )
        # Compare with what the valid part yields before `finish`: garbage may stop the run there.
        fed = drive(make, feed, finish, [data], end=False).values
        assert dirty.values[: len(fed)] == fed, (
            f"trailing garbage changed earlier values: {dirty.describe()}"
        )
        if garbage_raises is None:
            assert dirty.error is None, f"garbage raised: {dirty.describe()}"
        else:
            assert isinstance(dirty.error, garbage_raises), (
                f"garbage should raise {garbage_raises}: {dirty.describe()}"
            )
    return whole.values


def run_tail(
    make: Callable[[], C],
    feed: Callable[[C, bytes], Iterable[T]],
    finish: Callable[[C], Iterable[T]],
    data: bytes,
    *,
    raises: ErrorTypes | None = None,
    splits: Sequence[Sequence[bytes]] | None = None,
) -> list[T]:
    """Feed `data` (typically cut short), call `finish`, and check how the tail was handled.

    Runs whole, byte by byte and in any extra `splits`, which must all agree. If `raises` is
    given, `finish` (or an earlier feed) must raise one of those types; the values pulled out
    before that are returned. Otherwise nothing may raise and every value (including what `finish`
    flushed) is returned.
    """
    ways = [[data], bytewise(data), *(list(s) for s in splits or ())]
    outcomes = [drive(make, feed, finish, chunks) for chunks in ways]
    first = outcomes[0]
    for other in outcomes[1:]:
        assert _same(other, first), (
            f"split input decodes differently:\n  {first.describe()}\n  {other.describe()}"
        )
    if raises is None:
        if first.error is not None:
            raise AssertionError(f"tail raised: {first.describe()}") from first.error
    else:
        assert isinstance(first.error, raises), f"tail should raise {raises}: {first.describe()}"
    return first.values
