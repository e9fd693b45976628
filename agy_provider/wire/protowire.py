"""A zero-dependency protobuf wire-format walker: the runtime decoder for agy's SQLite blobs.

Owns varints, field iteration and the lazy `Message` view; sans-I/O, only `DecodeError` escapes.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import NamedTuple
from typing import TypeAlias
from typing import TypeVar

from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError

# The contract:
# - Input is never trusted. Truncation, overlong varints, groups (wire types 3/4), reserved wire
#   types 6/7, field number 0 (or above 2**29 - 1), a LEN running past its message, invalid UTF-8
#   and nesting deeper than MAX_DEPTH all raise DecodeError naming the absolute byte offset (also
#   on DecodeError.offset). No other exception leaves this module.
# - Lazy: a Message scans its own top-level fields once, on first access, *skipping* over LEN
#   payloads; a nested message is only scanned when it is read.
# - No copies: nested views share the outermost bytes; Field.value of a LEN field is a memoryview
#   slice of it. Only string()/bytes_() copy, because they return new objects.
# - Schema-free: a field read with the wrong wire type (a string read as an integer, a varint read
#   as a message) is a DecodeError, never a guess. A field that occurs more than once reads as its
#   last occurrence (protobuf's "last one wins"); protobuf would merge repeated occurrences of an
#   embedded message, but Go, which writes agy's blobs, never splits one.

__all__ = [
    "EGROUP",
    "I32",
    "I64",
    "LEN",
    "MAX_DEPTH",
    "MAX_FIELD_NUMBER",
    "MAX_VARINT_BYTES",
    "SGROUP",
    "VARINT",
    "Field",
    "Message",
    "decode_varint",
    "iter_fields",
]

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5

# A 64-bit value needs ceil(64 / 7) = 10 groups of 7 bits; an 11th byte can only be garbage, and
# the 10th may carry just the top bit (so it is 0 or 1).
MAX_VARINT_BYTES = 10

# The deepest real payload nests 8 levels (a legacy Step inside the Any at 140.2.6, down to its
# timestamps); 64 leaves room for newer builds and recursive schema types, while a hostile blob of
# a few hundred bytes (each level costs 2) cannot drive a recursive walker into RecursionError.
MAX_DEPTH = 64

# Field numbers are 29-bit (protobuf's limit): anything larger in a tag is corruption.
MAX_FIELD_NUMBER = (1 << 29) - 1

# The wire types each typed reader accepts, by the words its mismatch error ends with.
_READS = {
    "LEN (bytes)": (LEN,),
    "an integer": (VARINT, I64, I32),
    "VARINT (a bool)": (VARINT,),
}
_WIRE_NAMES = ("VARINT", "I64", "LEN", "SGROUP", "EGROUP", "I32", "wire type 6", "wire type 7")
_U64 = (1 << 64) - 1
_SIGN64 = 1 << 63

Buffer: TypeAlias = bytes | bytearray | memoryview
_T = TypeVar("_T")


class Field(NamedTuple):
    """One field as it sits on the wire.

    `value` is the raw unsigned integer for VARINT, I64 and I32, and a `memoryview` slice (no copy)
    of the payload for LEN. `offset` is the absolute byte offset of the field's tag in the
    outermost buffer.
    """

    number: int
    wire_type: int
    value: int | memoryview
    offset: int


# A scanned field, cheaper than a Field: (number, wire type, value or LEN payload start,
# tag position in the shared buffer, LEN payload end or 0). Fields are built from these on demand.
_Entry: TypeAlias = tuple[int, int, int, int, int]


def _varint(data: Buffer, pos: int, end: int, where: int) -> tuple[int, int]:
    """Decode the varint at `pos` (slow path: any length); `where` is its absolute offset."""
    result = 0
    shift = 0
    limit = pos + MAX_VARINT_BYTES
    while True:
        if pos >= end:
            raise DecodeError("truncated varint", where)
        if pos >= limit:
            raise DecodeError(f"varint longer than {MAX_VARINT_BYTES} bytes", where)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result > _U64:
                raise DecodeError("varint overflows 64 bits", where)
            return result, pos
        shift += 7


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode the varint starting at `pos` in `buf`.

    Returns `(value, new_pos)`. Raises `DecodeError` (offset = `pos`) when the varint is
    truncated, longer than `MAX_VARINT_BYTES`, overflows 64 bits, or `pos` is outside `buf`.
    """
    data = _indexable(buf)
    if pos < 0 or pos >= len(data):
        raise DecodeError("varint position outside the buffer", pos)
    return _varint(data, pos, len(data), pos)


def _indexable(buf: Buffer) -> Buffer:
    """`buf` in a form whose `[i]` is an unsigned byte and whose `len()` counts bytes."""
    if isinstance(buf, memoryview):
        if buf.format == "B" and buf.ndim == 1:
            return buf
        # Signed, char, wide or multi-dimensional views would index as something else than a
        # byte: recast a flat one in place, copy the odd rest.
        if buf.ndim == 1 and buf.c_contiguous:
            return buf.cast("B")
        return memoryview(buf.tobytes())
    if isinstance(buf, bytes | bytearray):
        return buf
    raise UsageError(f"expected bytes, bytearray or memoryview, not {type(buf).__name__}")


def _entries(data: Buffer, pos: int, end: int, delta: int) -> Iterator[_Entry]:
    """Yield the fields of `data[pos:end]` in order, checking each before it is yielded.

    The careful walk: it names precisely what is wrong and where. `delta` turns a position in
    `data` into an absolute offset. LEN payloads are skipped, never descended into.
    """
    while pos < end:
        tagpos = pos
        where = pos + delta
        tag, pos = _varint(data, pos, end, where)
        number = tag >> 3
        wire_type = tag & 7
        if number == 0:
            raise DecodeError("field number 0", where)
        if number > MAX_FIELD_NUMBER:
            raise DecodeError(f"field number {number} out of range", where)
        if wire_type == LEN:
            if pos >= end:
                raise DecodeError(f"field {number}: truncated length", where)
            size, pos = _varint(data, pos, end, pos + delta)
            if pos + size > end:
                raise DecodeError(
                    f"field {number}: length {size} runs past the end of its message by "
                    f"{pos + size - end} bytes",
                    where,
                )
            yield (number, LEN, pos, tagpos, pos + size)
            pos += size
        elif wire_type == VARINT:
            if pos >= end:
                raise DecodeError(f"field {number}: truncated varint", where)
            value, pos = _varint(data, pos, end, pos + delta)
            yield (number, VARINT, value, tagpos, 0)
        elif wire_type == I32:
            if pos + 4 > end:
                raise DecodeError(f"field {number}: truncated fixed32", where)
            yield (number, I32, int.from_bytes(data[pos : pos + 4], "little"), tagpos, 0)
            pos += 4
        elif wire_type == I64:
            if pos + 8 > end:
                raise DecodeError(f"field {number}: truncated fixed64", where)
            yield (number, I64, int.from_bytes(data[pos : pos + 8], "little"), tagpos, 0)
            pos += 8
        elif wire_type in (SGROUP, EGROUP):
            raise DecodeError(
                f"field {number}: groups (wire type {wire_type}) are not supported", where
            )
        else:
            raise DecodeError(f"field {number}: invalid wire type {wire_type}", where)


def _malformed(data: bytes, pos: int, end: int, delta: int) -> DecodeError:
    """The precise error for `data[pos:end]`, which the fast scan found malformed."""
    try:
        for _ in _entries(data, pos, end, delta):
            pass
    except DecodeError as exc:
        return exc
    # Unreachable while _scan and _entries agree (a test holds them together); stay a DecodeError.
    return DecodeError("malformed message", pos + delta)


def iter_fields(buf: Buffer, base_offset: int = 0) -> Iterator[Field]:
    """Yield the top-level fields of the encoded message `buf`, in order, in one pass.

    LEN payloads are skipped, not descended into, and handed out as `memoryview` slices of `buf`
    (no copy). `base_offset` is added to every offset (the position of `buf` in an outer buffer).
    Raises `DecodeError` naming the absolute offset when it reaches malformed input; the fields
    before it have been yielded.
    """
    data = _indexable(buf)
    view = data if isinstance(data, memoryview) else memoryview(data)
    for number, wire_type, value, tagpos, end in _entries(data, 0, len(data), base_offset):
        if wire_type == LEN:
            yield Field(number, LEN, view[value:end], tagpos + base_offset)
        else:
            yield Field(number, wire_type, value, tagpos + base_offset)


class Message:
    """Lazy read-only view of one encoded message.

    Parses its own top-level fields once on first access; nested messages are decoded only when
    asked for. Typed readers take the field's *last* occurrence (protobuf's "last one wins") and
    return `default` when the field is absent. Every reader raises `DecodeError` (naming the
    absolute offset) on malformed bytes or when the field has the wrong wire type.

    `buf` may be `bytes` (shared, never copied) or any bytes-like object (copied once, so the view
    cannot change under us). `base_offset` is the position of `buf` in an outer buffer, added to
    every reported offset; `depth` is this message's nesting depth (bounded by `MAX_DEPTH`).
    """

    __slots__ = ("_data", "_delta", "_depth", "_end", "_kids", "_last", "_order", "_start")

    _data: bytes
    _start: int
    _end: int
    _delta: int
    _depth: int
    _last: dict[int, _Entry] | None
    _kids: dict[int, Message] | None
    _order: list[_Entry] | None

    def __init__(self, buf: Buffer, *, base_offset: int = 0, depth: int = 0) -> None:
        data = buf if type(buf) is bytes else bytes(_indexable(buf))
        if depth > MAX_DEPTH:
            raise DecodeError(f"message nested deeper than {MAX_DEPTH}", base_offset)
        self._data = data
        self._start = 0
        self._end = len(data)
        self._delta = base_offset
        self._depth = depth
        self._last = None
        self._kids = None
        self._order = None

    def __repr__(self) -> str:
        where = self._start + self._delta
        return f"<Message {self._end - self._start} bytes at {where}, depth {self._depth}>"

    # -- internals -----------------------------------------------------------------------------

    def _scan(self) -> dict[int, _Entry]:
        """Scan this message once: the last entry per field number. The hot loop of this module.

        Fast and optimistic: bounds are not checked byte by byte. Reading past the end either
        fails (IndexError at the end of the buffer) or leaves `pos` beyond `end`; both, like every
        other anomaly, hand over to `_entries` to say precisely what is wrong.
        """
        data = self._data
        pos = self._start
        end = self._end
        delta = self._delta
        # Wire types are literals (0 VARINT, 2 LEN, 5 I32, 1 I64): globals cost in this loop.
        last: dict[int, _Entry] = {}
        try:
            while pos < end:
                tagpos = pos
                tag = data[pos]
                pos += 1
                if tag >= 0x80:
                    # Tags of fields 16..2047 take two bytes, and agy uses many (140, 5.20, ...).
                    if data[pos] < 0x80:
                        tag = (tag & 0x7F) | (data[pos] << 7)
                        pos += 1
                    else:
                        tag, pos = _varint(data, tagpos, end, tagpos + delta)
                        if tag >> 3 > MAX_FIELD_NUMBER:
                            break
                wire_type = tag & 7
                # The varint below is read inline twice, for a LEN's size and a VARINT's value:
                # one branch for both costs ~3% of decode_step_row (bench_decode).
                if wire_type == 2:
                    size = data[pos]
                    if size < 0x80:
                        pos += 1
                    elif data[pos + 1] < 0x80:
                        size = (size & 0x7F) | (data[pos + 1] << 7)
                        pos += 2
                    else:
                        size, pos = _varint(data, pos, end, pos + delta)
                    number = tag >> 3
                    last[number] = (number, 2, pos, tagpos, pos + size)
                    pos += size
                elif wire_type == 0:
                    value = data[pos]
                    if value < 0x80:
                        pos += 1
                    elif data[pos + 1] < 0x80:
                        value = (value & 0x7F) | (data[pos + 1] << 7)
                        pos += 2
                    else:
                        value, pos = _varint(data, pos, end, pos + delta)
                    number = tag >> 3
                    last[number] = (number, 0, value, tagpos, 0)
                elif wire_type == 5:
                    value = int.from_bytes(data[pos : pos + 4], "little")
                    pos += 4
                    number = tag >> 3
                    last[number] = (number, 5, value, tagpos, 0)
                elif wire_type == 1:
                    value = int.from_bytes(data[pos : pos + 8], "little")
                    pos += 8
                    number = tag >> 3
                    last[number] = (number, 1, value, tagpos, 0)
                else:
                    break
            else:
                if pos == end and 0 not in last:
                    self._last = last
                    return last
        except (IndexError, DecodeError):
            # A varint read past `end` may fail with a misleading offset: let _entries say it.
            pass
        raise _malformed(data, self._start, end, delta)

    def _ordered(self) -> list[_Entry]:
        """Every entry in wire order; only repeated and whole-message reads need it."""
        if self._order is None:
            self._order = list(_entries(self._data, self._start, self._end, self._delta))
        return self._order

    def _all(self, number: int) -> list[_Entry]:
        return [entry for entry in self._ordered() if entry[0] == number]

    def _field(self, entry: _Entry) -> Field:
        number, wire_type, value, tagpos, end = entry
        if wire_type == LEN:
            return Field(number, LEN, memoryview(self._data)[value:end], tagpos + self._delta)
        return Field(number, wire_type, value, tagpos + self._delta)

    def _mismatch(self, entry: _Entry, wanted: str) -> DecodeError:
        return DecodeError(
            f"field {entry[0]} has wire type {_WIRE_NAMES[entry[1]]}, expected {wanted}",
            entry[3] + self._delta,
        )

    def _child(self, entry: _Entry) -> Message:
        if entry[1] != LEN:
            raise self._mismatch(entry, "LEN (a message)")
        depth = self._depth + 1
        if depth > MAX_DEPTH:
            raise DecodeError(
                f"field {entry[0]}: message nested deeper than {MAX_DEPTH}", entry[3] + self._delta
            )
        child = _new_message(Message)
        child._data = self._data
        child._start = entry[2]
        child._end = entry[4]
        child._delta = self._delta
        child._depth = depth
        child._last = None
        child._kids = None
        child._order = None
        return child

    def _text(self, entry: _Entry) -> str:
        if entry[1] != LEN:
            raise self._mismatch(entry, "LEN (a string)")
        start = entry[2]
        try:
            return self._data[start : entry[4]].decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"field {entry[0]}: invalid UTF-8 ({exc.reason})", start + exc.start + self._delta
            ) from None

    # -- structure -----------------------------------------------------------------------------

    @property
    def raw(self) -> memoryview:
        """The encoded bytes of this message (a view, no copy)."""
        return memoryview(self._data)[self._start : self._end]

    @property
    def depth(self) -> int:
        """How deeply this message is nested (0 for the one built from the outermost buffer)."""
        return self._depth

    @property
    def offset(self) -> int:
        """Absolute offset of this message's first byte."""
        return self._start + self._delta

    def fields(self) -> Sequence[Field]:
        """Every top-level field, in wire order (the walk is cached; the tuple is new each call)."""
        return tuple(self._field(entry) for entry in self._ordered())

    def numbers(self) -> set[int]:
        """The field numbers present (a new set)."""
        return set(self._last or self._scan())

    def has(self, number: int) -> bool:
        """Whether field `number` occurs at all."""
        return number in (self._last or self._scan())

    def get(self, number: int) -> Field | None:
        """The last occurrence of field `number`, or None."""
        entry = (self._last or self._scan()).get(number)
        return None if entry is None else self._field(entry)

    def get_all(self, number: int) -> list[Field]:
        """Every occurrence of field `number`, in order (repeated fields)."""
        return [self._field(entry) for entry in self._all(number)]

    # -- nested messages -----------------------------------------------------------------------

    def message(self, number: int) -> Message | None:
        """The last occurrence of field `number` as a nested Message, or None when absent.

        Raises `DecodeError` when that occurrence is not LEN or nesting exceeds `MAX_DEPTH`; the
        nested bytes themselves are checked when the result is first read. The same nested
        Message is returned on every call, so its fields are scanned once.
        """
        kids = self._kids
        if kids is not None:
            kid = kids.get(number)
            if kid is not None:
                return kid
        entry = (self._last or self._scan()).get(number)
        if entry is None:
            return None
        depth = self._depth + 1
        if entry[1] != 2 or depth > MAX_DEPTH:
            return self._child(entry)  # raises the precise error
        # _child's body, inlined: navigation is on the hot path (a call here costs the walker
        # ~6% of its time in bench_decode, so duplicates lists this pair on purpose).
        kid = _new_message(Message)
        kid._data = self._data
        kid._start = entry[2]
        kid._end = entry[4]
        kid._delta = self._delta
        kid._depth = depth
        kid._last = None
        kid._kids = None
        kid._order = None
        if kids is None:
            self._kids = {number: kid}
        else:
            kids[number] = kid
        return kid

    def messages(self, number: int) -> list[Message]:
        """Every occurrence of field `number` as a nested Message, in order."""
        return [self._child(entry) for entry in self._all(number)]

    def path(self, *numbers: int) -> Message | None:
        """Follow `message()` through `numbers` (`path(5, 9)` is 5.9); None when a hop is absent.

        `path()` with no numbers is this message itself.
        """
        message = self
        for number in numbers:
            hop = message.message(number)
            if hop is None:
                return None
            message = hop
        return message

    # -- scalars -------------------------------------------------------------------------------

    def _typed(self, number: builtins.int, wire_types: str) -> _Entry | None:
        """The last entry of field `number` (None when absent), checked against `wire_types`.

        `wire_types` names a row of `_READS`: the wire types a reader accepts, and its wording.
        """
        entry = (self._last or self._scan()).get(number)
        if entry is not None and entry[1] not in _READS[wire_types]:
            raise self._mismatch(entry, wire_types)
        return entry

    def string(self, number: builtins.int, default: str = "") -> str:
        """The last occurrence of field `number` decoded as UTF-8, or `default`."""
        entry = (self._last or self._scan()).get(number)
        return default if entry is None else self._text(entry)

    def strings(self, number: builtins.int) -> list[str]:
        """Every occurrence of field `number` decoded as UTF-8, in order."""
        return [self._text(entry) for entry in self._all(number)]

    def bytes_(self, number: builtins.int, default: bytes = b"") -> bytes:
        """The last occurrence of field `number` as bytes (a copy), or `default`."""
        entry = self._typed(number, "LEN (bytes)")
        return default if entry is None else self._data[entry[2] : entry[4]]

    def uint(self, number: builtins.int, default: builtins.int = 0) -> builtins.int:
        """The last occurrence of field `number` as an unsigned integer (varint or fixed)."""
        # `_typed` inlined: the decoders read a uint for nearly every step (~2% of their time).
        entry = (self._last or self._scan()).get(number)
        if entry is None:
            return default
        if entry[1] == LEN:
            raise self._mismatch(entry, "an integer")
        return entry[2]

    def int(self, number: builtins.int, default: builtins.int = 0) -> builtins.int:
        """The last occurrence of field `number` as a signed integer (int32/int64 semantics).

        A varint is the two's complement of its 64 bits (int32 -1 is encoded as the ten bytes
        `ff ff ff ff ff ff ff ff ff 01`); fixed32 and fixed64 read as sfixed32 and sfixed64.
        """
        entry = self._typed(number, "an integer")
        if entry is None:
            return default
        value = entry[2]
        if entry[1] == I32:
            return value - (1 << 32) if value & 0x80000000 else value
        return value - (1 << 64) if value & _SIGN64 else value

    def bool(self, number: builtins.int, default: builtins.bool = False) -> builtins.bool:
        """The last occurrence of varint field `number` as a bool (non-zero is True)."""
        entry = self._typed(number, "VARINT (a bool)")
        return default if entry is None else entry[2] != 0

    def packed_uints(self, number: builtins.int) -> list[builtins.int]:
        """Every value of repeated varint field `number`, packed (LEN) or not, in wire order."""
        values: list[builtins.int] = []
        data = self._data
        for entry in self._all(number):
            if entry[1] == VARINT:
                values.append(entry[2])
            elif entry[1] == LEN:
                pos, end = entry[2], entry[4]
                while pos < end:
                    value, pos = _varint(data, pos, end, pos + self._delta)
                    values.append(value)
            else:
                raise self._mismatch(entry, "VARINT or packed LEN")
        return values

    # -- paths ---------------------------------------------------------------------------------

    def path_string(self, *numbers: builtins.int, default: str = "") -> str:
        """`path(*numbers[:-1]).string(numbers[-1])`, or `default` when any hop is absent."""
        return self._at_path(Message.string, numbers, default)

    def path_uint(self, *numbers: builtins.int, default: builtins.int = 0) -> builtins.int:
        """`path(*numbers[:-1]).uint(numbers[-1])`, or `default` when any hop is absent."""
        return self._at_path(Message.uint, numbers, default)

    def _at_path(
        self,
        read: Callable[[Message, builtins.int, _T], _T],
        numbers: tuple[builtins.int, ...],
        default: _T,
    ) -> _T:
        if not numbers:
            raise UsageError(f"path_{read.__name__}() needs at least one field number")
        message = self
        for number in numbers[:-1]:
            hop = message.message(number)
            if hop is None:
                return default
            message = hop
        return read(message, numbers[-1], default)


_new_message = object.__new__
