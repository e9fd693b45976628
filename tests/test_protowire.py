"""Tests of the protobuf wire walker: units, properties against the `protobuf` package, fuzzing.

The `protobuf` package is the independent implementation here: it encodes the property-test
messages and parses the real payloads in ../shared/reference with agy's real schema.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import struct
from collections.abc import Callable
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from codec_helpers import run_three_ways
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError
from agy_provider.sim.descriptors import load_descriptor_set
from agy_provider.wire import protowire
from agy_provider.wire.protowire import EGROUP
from agy_provider.wire.protowire import I32
from agy_provider.wire.protowire import I64
from agy_provider.wire.protowire import LEN
from agy_provider.wire.protowire import MAX_DEPTH
from agy_provider.wire.protowire import MAX_FIELD_NUMBER
from agy_provider.wire.protowire import MAX_VARINT_BYTES
from agy_provider.wire.protowire import SGROUP
from agy_provider.wire.protowire import VARINT
from agy_provider.wire.protowire import Field
from agy_provider.wire.protowire import Message
from agy_provider.wire.protowire import decode_varint
from agy_provider.wire.protowire import iter_fields

REFERENCE = Path(__file__).parents[1].parent / "shared" / "reference"
PAYLOADS = REFERENCE / "sqlite-payloads"
PONG = "agy-1.1.23_witness_step15_assistant_PONG.step_payload.bin"
USER_PONG = "agy-1.1.23_witness_step14_user_PONG.step_payload.bin"
RUN_COMMAND = "agy-1.1.23_witness_step132_run_command.step_payload.bin"
PREFIX_ONLY = "agy-1.1.9_transcript_step15_planner.PREFIX_ONLY.bin"
OLD_USER = "agy-1.0.16_txcript_step14_user.step_payload.bin"
OLD_USER_METADATA = "agy-1.0.16_txcript_step14_user.metadata.bin"

U64 = (1 << 64) - 1


# -- a tiny independent encoder, for hand-made (and deliberately broken) inputs ----------------


def varint(value: int) -> bytes:
    value &= U64  # negative numbers as protobuf writes int32/int64: ten bytes, sign-extended
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def f_varint(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value)


def f_len(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return tag(number, LEN) + varint(len(data)) + data


def f_fixed32(number: int, value: int) -> bytes:
    return tag(number, I32) + struct.pack("<I", value)


def f_fixed64(number: int, value: int) -> bytes:
    return tag(number, I64) + struct.pack("<Q", value)


def zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def signed(value: int, bits: int = 64) -> int:
    return value - (1 << bits) if value >> (bits - 1) else value


def must(message: Message | None) -> Message:
    assert message is not None
    return message


def payload(name: str) -> bytes:
    if not PAYLOADS.is_dir():
        pytest.skip("../shared/reference is not beside this checkout")
    return (PAYLOADS / name).read_bytes()


def all_payloads() -> list[bytes]:
    if not PAYLOADS.is_dir():
        pytest.skip("../shared/reference is not beside this checkout")
    return [path.read_bytes() for path in sorted(PAYLOADS.glob("*.bin"))]


# -- exercising everything: only DecodeError may come out ---------------------------------------

ACCESSORS: tuple[Callable[[Message, int], object], ...] = (
    Message.get,
    Message.get_all,
    Message.has,
    Message.uint,
    Message.int,
    Message.bool,
    Message.string,
    Message.strings,
    Message.bytes_,
    Message.packed_uints,
    Message.message,
    Message.messages,
    Message.path,
    Message.path_string,
    Message.path_uint,
)


def exercise(message: Message) -> int:
    """Call every reader on every field of `message`, treating each LEN as a possible message.

    Returns how many DecodeErrors were raised; any other exception fails the test.
    """
    errors = 0
    try:
        fields = message.fields()
        numbers = message.numbers()
    except DecodeError:
        return 1
    assert {field.number for field in fields} == numbers
    for number in [*sorted(numbers), MAX_FIELD_NUMBER]:
        for accessor in ACCESSORS:
            try:
                accessor(message, number)
            except DecodeError:
                errors += 1
    for number in sorted(numbers):
        try:
            kids = message.messages(number)
        except DecodeError:  # some occurrence is not LEN: walk the ones that are, by hand
            errors += 1
            kids = [kid for kid_number, kid in len_kids(message) if kid_number == number]
        for kid in kids:
            errors += exercise(kid)
    return errors


def len_kids(message: Message) -> Iterator[tuple[int, Message]]:
    """Every LEN field of `message` as a Message built with the public constructor."""
    raw = message.raw
    for field in message.fields():
        if field.wire_type == LEN and message.depth < MAX_DEPTH:
            _, pos = decode_varint(raw, field.offset - message.offset)  # the tag
            _, pos = decode_varint(raw, pos)  # the length
            assert isinstance(field.value, memoryview)
            yield (
                field.number,
                Message(field.value, base_offset=message.offset + pos, depth=message.depth + 1),
            )


# -- varints -----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", range(1, MAX_VARINT_BYTES + 1))
def test_varint_of_every_length(length: int) -> None:
    largest = min((1 << (7 * length)) - 1, U64)
    smallest = 1 << (7 * (length - 1)) if length > 1 else 0
    for value in (smallest, largest):
        encoded = varint(value)
        assert len(encoded) == length
        assert decode_varint(encoded, 0) == (value, length)
        # At an offset inside a larger buffer, through a memoryview too.
        buf = b"\x01\x02" + encoded + b"\x7f"
        assert decode_varint(buf, 2) == (value, 2 + length)
        assert decode_varint(memoryview(buf), 2) == (value, 2 + length)


def test_varint_of_negative_int32_is_ten_bytes() -> None:
    assert varint(-1) == b"\xff" * 9 + b"\x01"
    assert decode_varint(varint(-1), 0) == (U64, 10)


def test_non_minimal_varint_is_accepted() -> None:
    assert decode_varint(b"\x80\x80\x00", 0) == (0, 3)
    assert decode_varint(b"\x80" * 9 + b"\x00", 0) == (0, 10)


def test_eleven_byte_varint_is_overlong() -> None:
    with pytest.raises(DecodeError, match="longer than 10 bytes") as info:
        decode_varint(b"\x00\x00\x00" + b"\x80" * 10 + b"\x00", 3)
    assert info.value.offset == 3


def test_tenth_byte_above_one_overflows() -> None:
    with pytest.raises(DecodeError, match="overflows 64 bits") as info:
        decode_varint(b"\xff" * 9 + b"\x02", 0)
    assert info.value.offset == 0


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\xff" * 9])
def test_truncated_varint(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_varint(data, 0)


@pytest.mark.parametrize("pos", [-1, 3, 100])
def test_varint_position_outside_buffer(pos: int) -> None:
    with pytest.raises(DecodeError) as info:
        decode_varint(b"\x01\x02\x03", pos)
    assert info.value.offset == pos


# -- malformed fields --------------------------------------------------------------------------

MALFORMED = {
    "truncated varint value": (f_varint(1, 1) + tag(2, VARINT) + b"\x80", 2),
    "truncated fixed32": (f_varint(1, 1) + tag(3, I32) + b"\x01\x02\x03", 2),
    "truncated fixed64": (f_varint(1, 1) + tag(3, I64) + b"\x01" * 7, 2),
    "truncated LEN length": (f_varint(1, 1) + tag(4, LEN), 2),
    "LEN longer than the rest": (f_varint(1, 1) + tag(4, LEN) + b"\x05abcd", 2),
    "group start": (f_varint(1, 1) + tag(5, SGROUP) + f_varint(1, 1) + tag(5, EGROUP), 2),
    "group end": (f_varint(1, 1) + tag(5, EGROUP), 2),
    "wire type 6": (f_varint(1, 1) + tag(5, 6), 2),
    "wire type 7": (f_varint(1, 1) + tag(5, 7), 2),
    "field number 0": (f_varint(1, 1) + tag(0, VARINT) + b"\x01", 2),
    "field number 0 as LEN": (f_varint(1, 1) + tag(0, LEN) + b"\x00", 2),
    "field number too large": (f_varint(1, 1) + varint((1 << 29) << 3) + b"\x01", 2),
    "truncated tag": (f_varint(1, 1) + b"\x80", 2),
    "overlong tag": (f_varint(1, 1) + b"\x80" * 10 + b"\x00", 2),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_raises_with_offset(name: str) -> None:
    data, offset = MALFORMED[name]
    # A varint error inside the field names the varint; everything else names the tag.
    with pytest.raises(DecodeError) as scanned:
        Message(data).numbers()
    assert scanned.value.offset in (offset, offset + 1)
    assert f"(at byte {scanned.value.offset})" in str(scanned.value)
    # The careful walk and the fast scan report the same error.
    with pytest.raises(DecodeError) as walked:
        list(iter_fields(data))
    assert str(walked.value) == str(scanned.value)
    # With a base offset, and nested inside another message, the offset is absolute.
    with pytest.raises(DecodeError) as based:
        Message(data, base_offset=1000).fields()
    assert based.value.offset == scanned.value.offset + 1000
    outer = f_varint(1, 7) + f_len(2, data)  # the nested payload starts at byte 4
    nested = Message(outer).message(2)
    assert nested is not None
    with pytest.raises(DecodeError) as deep:
        nested.get(1)
    assert deep.value.offset == scanned.value.offset + 4


def test_groups_are_named_in_the_error() -> None:
    with pytest.raises(DecodeError, match="groups"):
        Message(tag(1, SGROUP)).fields()


def test_iter_fields_yields_the_fields_before_an_error() -> None:
    data = f_varint(1, 5) + f_len(2, "ab") + tag(3, SGROUP)
    fields = iter_fields(data)
    assert next(fields).number == 1
    assert next(fields).number == 2
    with pytest.raises(DecodeError) as info:
        next(fields)
    assert info.value.offset == 6


def test_a_malformed_message_fails_every_read_not_just_the_first() -> None:
    message = Message(f_varint(1, 5) + tag(2, LEN))
    for _ in range(2):
        with pytest.raises(DecodeError):
            message.uint(1)


# -- scalars -----------------------------------------------------------------------------------


def test_int_is_twos_complement_of_64_bits() -> None:
    data = f_varint(1, -1) + f_varint(2, -(2**31)) + f_varint(3, -(2**63)) + f_varint(4, 2**63 - 1)
    assert data[1:11] == b"\xff" * 9 + b"\x01"
    message = Message(data)
    assert message.int(1) == -1
    assert message.uint(1) == U64
    assert message.int(2) == -(2**31)
    assert message.int(3) == -(2**63)
    assert message.int(4) == 2**63 - 1
    assert message.int(9, default=-5) == -5


def test_fixed_width_values() -> None:
    data = f_fixed32(1, 0xDEADBEEF) + f_fixed64(2, 0x0123456789ABCDEF) + f_fixed64(3, U64)
    message = Message(data)
    assert message.uint(1) == 0xDEADBEEF
    assert message.int(1) == signed(0xDEADBEEF, 32)
    assert message.uint(2) == 0x0123456789ABCDEF
    assert message.int(3) == -1
    assert message.get(1) == Field(1, I32, 0xDEADBEEF, 0)
    assert message.get(2) == Field(2, I64, 0x0123456789ABCDEF, 5)
    (value,) = struct.unpack("<f", struct.pack("<I", Message(f_fixed32(1, 0x3FC00000)).uint(1)))
    assert value == 1.5


def test_bool_string_bytes_and_defaults() -> None:
    message = Message(f_varint(1, 1) + f_varint(2, 0) + f_len(3, "héllo") + f_len(4, b"\x00\xff"))
    assert message.bool(1) is True
    assert message.bool(2) is False
    assert message.bool(9, default=True) is True
    assert message.string(3) == "héllo"
    assert message.bytes_(4) == b"\x00\xff"
    assert message.string(9) == ""
    assert message.string(9, "x") == "x"
    assert message.bytes_(9) == b""
    assert message.uint(9) == 0
    assert message.uint(9, 7) == 7
    assert message.get(9) is None
    assert message.get_all(9) == []
    assert message.message(9) is None
    assert message.messages(9) == []
    assert message.strings(9) == []
    assert message.packed_uints(9) == []


def test_last_occurrence_wins_and_get_all_keeps_order() -> None:
    data = f_varint(1, 1) + f_len(2, "a") + f_varint(1, 2) + f_len(2, "b") + f_varint(1, 3)
    message = Message(data)
    assert message.uint(1) == 3
    assert message.string(2) == "b"
    assert message.get(1) == Field(1, VARINT, 3, 10)
    assert [field.value for field in message.get_all(1)] == [1, 2, 3]
    assert message.strings(2) == ["a", "b"]
    assert [field.number for field in message.fields()] == [1, 2, 1, 2, 1]
    assert message.numbers() == {1, 2}
    assert message.has(2)
    assert not message.has(3)


def test_last_occurrence_wins_across_wire_types() -> None:
    message = Message(f_len(1, "text") + f_varint(1, 5))
    assert message.uint(1) == 5
    with pytest.raises(DecodeError, match="expected LEN") as info:
        message.string(1)
    assert info.value.offset == 6


@pytest.mark.parametrize(
    ("read", "data"),
    [
        (Message.uint, f_len(1, "x")),
        (Message.int, f_len(1, "x")),
        (Message.bool, f_fixed32(1, 1)),
        (Message.string, f_varint(1, 1)),
        (Message.bytes_, f_fixed64(1, 1)),
        (Message.message, f_varint(1, 1)),
        (Message.packed_uints, f_fixed32(1, 1)),
        (Message.strings, f_varint(1, 1)),
        (Message.messages, f_varint(1, 1)),
    ],
)
def test_wrong_wire_type_is_a_decode_error(
    read: Callable[[Message, int], object], data: bytes
) -> None:
    with pytest.raises(DecodeError, match="has wire type") as info:
        read(Message(b"\x10\x01" + data), 1)
    assert info.value.offset == 2


def test_invalid_utf8_names_the_bad_byte() -> None:
    data = f_varint(1, 1) + f_len(2, f_len(3, b"ok\xff"))
    # outer: 08 01 | 12 05 | inner: 1a 03 'o' 'k' ff -> the bad byte is at 2 + 2 + 2 + 2 = 8
    inner = Message(data).message(2)
    assert inner is not None
    with pytest.raises(DecodeError, match="invalid UTF-8") as info:
        inner.string(3)
    assert info.value.offset == 8
    assert inner.bytes_(3) == b"ok\xff"
    with pytest.raises(DecodeError):
        inner.strings(3)


def test_packed_and_unpacked_repeated_varints() -> None:
    values = [0, 1, 127, 128, 300, 2**32, U64]
    packed = f_len(4, b"".join(varint(v) for v in values))
    unpacked = b"".join(f_varint(4, v) for v in values)
    assert Message(packed).packed_uints(4) == values
    assert Message(unpacked).packed_uints(4) == values
    # Parsers must accept both encodings, even mixed in one message.
    mixed = f_varint(4, 9) + packed + f_varint(4, 10)
    assert Message(mixed).packed_uints(4) == [9, *values, 10]
    assert Message(f_len(4, b"")).packed_uints(4) == []


def test_packed_varints_truncated_inside_the_payload() -> None:
    data = f_varint(1, 1) + f_len(4, b"\x01\x80")
    with pytest.raises(DecodeError, match="truncated varint") as info:
        Message(data).packed_uints(4)
    assert info.value.offset == 5


# -- messages, paths, laziness -----------------------------------------------------------------

USAGE = f_varint(2, 13901) + f_varint(3, 2)
METADATA = f_len(1, f_varint(1, 5)) + f_len(9, USAGE) + f_len(20, f_len(4, "cascade"))
STEP = f_varint(1, 15) + f_varint(4, 3) + f_len(5, METADATA) + f_len(20, f_len(1, "PONG"))


def test_nested_messages_and_paths() -> None:
    step = Message(STEP)
    assert step.path() is step
    assert step.path(20) is step.message(20)
    usage = step.path(5, 9)
    assert usage is not None
    assert usage.uint(2) == 13901
    assert step.path_uint(5, 9, 3) == 2
    assert step.path_string(20, 1) == "PONG"
    assert step.path_string(5, 20, 4) == "cascade"
    assert step.path(5, 7) is None
    assert step.path(6, 9) is None
    assert step.path_string(5, 7, 1, default="none") == "none"
    assert step.path_uint(30, 1, default=4) == 4
    assert step.path_uint(1) == 15
    with pytest.raises(DecodeError):
        step.path(1, 2)  # field 1 is a varint, not a message
    with pytest.raises(UsageError):
        step.path_string()


def test_nested_offsets_are_absolute() -> None:
    step = Message(STEP)
    metadata = step.message(5)
    assert metadata is not None
    assert metadata.offset == 6
    assert metadata.depth == 1
    usage = metadata.message(9)
    assert usage is not None
    assert usage.get(3) == Field(3, VARINT, 2, STEP.index(USAGE) + 3)
    assert bytes(usage.raw) == USAGE
    rebuilt = Message(STEP[6 : 6 + len(METADATA)], base_offset=6, depth=1)
    assert rebuilt.fields() == metadata.fields()
    cascade = step.path(5, 20)
    assert cascade is not None
    (field,) = cascade.fields()
    assert bytes(STEP[field.offset : field.offset + 9]) == f_len(4, "cascade")


def test_message_is_lazy() -> None:
    # A LEN payload that is not a message is skipped, not descended into.
    garbage = b"\xff\xff\xff"
    message = Message(f_varint(1, 1) + f_len(2, garbage))
    assert message.uint(1) == 1
    nested = message.message(2)
    assert nested is not None  # handing out the view does not parse it ...
    with pytest.raises(DecodeError):
        nested.fields()  # ... reading it does
    assert message.message(2) is nested  # navigation is cached


def test_repeated_messages() -> None:
    data = b"".join(
        f_len(3, f_len(1, key) + f_len(2, value)) for key, value in [("a", "1"), ("b", "2")]
    )
    entries = Message(data).messages(3)
    assert [(entry.string(1), entry.string(2)) for entry in entries] == [("a", "1"), ("b", "2")]


def test_values_are_views_of_the_outer_buffer() -> None:
    message = Message(STEP)
    field = message.get(20)
    assert field is not None
    assert isinstance(field.value, memoryview)
    assert field.value.obj is STEP
    assert bytes(field.value) == f_len(1, "PONG")
    assert message.raw.obj is STEP
    for field in iter_fields(STEP):
        if isinstance(field.value, memoryview):
            assert field.value.obj is STEP


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_bytes_like_input(kind: Callable[[bytes], Any]) -> None:
    assert Message(kind(STEP)).path_string(20, 1) == "PONG"
    assert [f.number for f in iter_fields(kind(STEP))] == [1, 4, 5, 20]


def test_signed_and_multidimensional_memoryviews_read_as_bytes() -> None:
    signed_view = memoryview(STEP).cast("b")
    assert [f.number for f in iter_fields(signed_view)] == [1, 4, 5, 20]
    assert decode_varint(memoryview(varint(300)).cast("b"), 0) == (300, 2)
    square = memoryview(b"\x08\x01\x10\x02").cast("B", (2, 2))
    assert [(f.number, f.value) for f in iter_fields(square)] == [(1, 1), (2, 2)]
    assert Message(square).uint(2) == 2


def test_not_bytes_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        Message("text")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        list(iter_fields(12))  # type: ignore[arg-type]


def test_iter_fields_base_offset() -> None:
    fields = list(iter_fields(STEP, base_offset=100))
    assert [f.offset for f in fields] == [100, 102, 104, 104 + 2 + len(METADATA)]
    assert fields == [f._replace(offset=f.offset + 100) for f in Message(STEP).fields()]


def test_empty_message() -> None:
    message = Message(b"")
    assert message.fields() == ()
    assert message.numbers() == set()
    assert list(iter_fields(b"")) == []


def nest(depth: int) -> bytes:
    data = f_varint(1, 42)
    for _ in range(depth):
        data = f_len(2, data)
    return data


def test_depth_is_bounded() -> None:
    message = Message(nest(100))
    for _ in range(MAX_DEPTH):
        inner = message.message(2)
        assert inner is not None
        message = inner
    assert message.depth == MAX_DEPTH
    with pytest.raises(DecodeError, match="nested deeper than 64") as info:
        message.message(2)
    assert info.value.offset == message.offset  # the tag of field 2 in the deepest view
    with pytest.raises(DecodeError):
        message.messages(2)
    with pytest.raises(DecodeError):
        Message(nest(100)).path(*[2] * 100)
    with pytest.raises(DecodeError):
        Message(b"", depth=MAX_DEPTH + 1)


def test_depth_bound_still_reaches_every_allowed_level() -> None:
    message = Message(nest(MAX_DEPTH))
    inner = message.path(*[2] * MAX_DEPTH)
    assert inner is not None
    assert inner.uint(1) == 42


def test_three_ways_with_the_shared_codec_helper() -> None:
    """The walker takes whole buffers: fed in pieces it must see the same message, and trailing
    garbage (a reserved wire type) must raise after the real fields came out unchanged."""

    def finish(buffer: bytearray) -> Iterator[tuple[int, int, object, int]]:
        for field in iter_fields(bytes(buffer)):
            value = bytes(field.value) if isinstance(field.value, memoryview) else field.value
            yield field.number, field.wire_type, value, field.offset

    def feed(buffer: bytearray, chunk: bytes) -> Iterator[tuple[int, int, object, int]]:
        buffer += chunk
        yield from ()

    values = run_three_ways(bytearray, feed, finish, STEP, garbage_raises=DecodeError)
    assert [value[0] for value in values] == [1, 4, 5, 20]


# -- the fast scan and the careful walk agree ---------------------------------------------------


def outcome(read: Callable[[], object]) -> object:
    try:
        return read()
    except DecodeError as exc:
        return ("error", str(exc), exc.offset)


def last_by_number(data: bytes) -> dict[int, Field]:
    return {field.number: field for field in iter_fields(data)}


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_fast_scan_agrees_with_careful_walk(data: bytes) -> None:
    scanned = outcome(lambda: {n: Message(data).get(n) for n in Message(data).numbers()})
    walked = outcome(lambda: last_by_number(data))
    assert scanned == walked
    assert outcome(lambda: Message(data).fields()) == outcome(lambda: tuple(iter_fields(data)))


@settings(max_examples=500)
@given(st.binary(max_size=100), st.binary(max_size=8))
def test_fast_scan_agrees_on_nested_views(inner: bytes, after: bytes) -> None:
    # The fast scan may read past a nested message's end into its parent: it must not be fooled.
    view = Message(f_len(7, inner) + f_len(8, after)).message(7)
    assert view is not None
    scanned = outcome(lambda: {n: view.get(n) for n in view.numbers()})
    walked = outcome(lambda: {f.number: f for f in iter_fields(inner, base_offset=2)})
    assert scanned == walked


# -- properties against the protobuf package ----------------------------------------------------

T = FieldDescriptor


def _test_schema() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="protowire_test.proto", package="pwtest")
    proto.syntax = "proto3"
    inner = proto.message_type.add(name="Inner")
    inner.field.add(name="a", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    inner.field.add(name="s", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    inner.field.add(name="b", number=3, type=T.TYPE_BYTES, label=T.LABEL_OPTIONAL)
    color = proto.enum_type.add(name="Color")
    for name, number in (("RED", 0), ("GREEN", 1), ("NEGATIVE", -3)):
        color.value.add(name=name, number=number)
    scalars = {
        "i32": T.TYPE_INT32,
        "i64": T.TYPE_INT64,
        "u32": T.TYPE_UINT32,
        "u64": T.TYPE_UINT64,
        "s32": T.TYPE_SINT32,
        "s64": T.TYPE_SINT64,
        "flag": T.TYPE_BOOL,
        "f32": T.TYPE_FIXED32,
        "f64": T.TYPE_FIXED64,
        "sf32": T.TYPE_SFIXED32,
        "sf64": T.TYPE_SFIXED64,
        "fl": T.TYPE_FLOAT,
        "db": T.TYPE_DOUBLE,
        "text": T.TYPE_STRING,
        "blob": T.TYPE_BYTES,
    }
    everything = proto.message_type.add(name="Everything")
    for number, (name, kind) in enumerate(scalars.items(), start=1):
        everything.field.add(name=name, number=number, type=kind, label=T.LABEL_OPTIONAL)
    add = everything.field.add
    add(name="color", number=16, type=T.TYPE_ENUM, type_name=".pwtest.Color", label=1)
    add(name="inner", number=17, type=T.TYPE_MESSAGE, type_name=".pwtest.Inner", label=1)
    add(name="packed", number=18, type=T.TYPE_INT32, label=T.LABEL_REPEATED)
    unpacked = add(name="unpacked", number=19, type=T.TYPE_UINT64, label=T.LABEL_REPEATED)
    unpacked.options.packed = False
    add(name="inners", number=20, type=T.TYPE_MESSAGE, type_name=".pwtest.Inner", label=3)
    add(name="texts", number=21, type=T.TYPE_STRING, label=T.LABEL_REPEATED)
    add(name="packed_sint", number=22, type=T.TYPE_SINT64, label=T.LABEL_REPEATED)
    add(name="far", number=MAX_FIELD_NUMBER, type=T.TYPE_UINT32, label=T.LABEL_OPTIONAL)
    add(name="mid", number=2047, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    add(name="wide", number=2048, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    return proto


@cache
def pw_classes() -> tuple[Any, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_test_schema())
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("pwtest.Everything")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("pwtest.Inner")),
    )


int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
uint32s = st.integers(0, 2**32 - 1)
uint64s = st.integers(0, U64)
texts = st.text(max_size=40)
blobs = st.binary(max_size=40)


@st.composite
def inners(draw: st.DrawFn) -> Any:
    _, inner = pw_classes()
    return inner(a=draw(int64s), s=draw(texts), b=draw(blobs))


@st.composite
def everythings(draw: st.DrawFn) -> Any:
    everything, _ = pw_classes()
    values: dict[str, Any] = {
        "i32": draw(int32s),
        "i64": draw(int64s),
        "u32": draw(uint32s),
        "u64": draw(uint64s),
        "s32": draw(int32s),
        "s64": draw(int64s),
        "flag": draw(st.booleans()),
        "f32": draw(uint32s),
        "f64": draw(uint64s),
        "sf32": draw(int32s),
        "sf64": draw(int64s),
        "fl": draw(st.floats(width=32, allow_nan=False)),
        "db": draw(st.floats(allow_nan=False)),
        "text": draw(texts),
        "blob": draw(blobs),
        "color": draw(st.sampled_from([0, 1, -3, 7])),  # proto3 enums are open: 7 is kept
        "packed": draw(st.lists(int32s, max_size=8)),
        "unpacked": draw(st.lists(uint64s, max_size=8)),
        "inners": draw(st.lists(inners(), max_size=4)),
        "texts": draw(st.lists(texts, max_size=4)),
        "packed_sint": draw(st.lists(int64s, max_size=8)),
        "far": draw(uint32s),
        "mid": draw(texts),
        "wide": draw(int32s),
    }
    # Leave some fields out, so presence and defaults are tested too.
    chosen = draw(st.sets(st.sampled_from(sorted(values))))
    message = everything(**{name: values[name] for name in chosen})
    if draw(st.booleans()):
        message.inner.CopyFrom(draw(inners()))
    return message


def _scalar(message: Message, fd: Any) -> object:
    """Read singular scalar field `fd` with the walker, as protobuf would present it."""
    number, kind = fd.number, fd.type
    if kind in (T.TYPE_INT32, T.TYPE_INT64, T.TYPE_SFIXED32, T.TYPE_SFIXED64, T.TYPE_ENUM):
        return message.int(number)
    if kind in (T.TYPE_UINT32, T.TYPE_UINT64, T.TYPE_FIXED32, T.TYPE_FIXED64):
        return message.uint(number)
    if kind in (T.TYPE_SINT32, T.TYPE_SINT64):
        return zigzag(message.uint(number))
    if kind == T.TYPE_BOOL:
        return message.bool(number)
    if kind == T.TYPE_STRING:
        return message.string(number)
    if kind == T.TYPE_BYTES:
        return message.bytes_(number)
    if kind == T.TYPE_FLOAT:
        return struct.unpack("<f", struct.pack("<I", message.uint(number)))[0]
    if kind == T.TYPE_DOUBLE:
        return struct.unpack("<d", struct.pack("<Q", message.uint(number)))[0]
    raise AssertionError(f"unexpected field type {kind}")


def _repeated_scalars(message: Message, fd: Any) -> list[object]:
    kind = fd.type
    if kind == T.TYPE_STRING:
        return list(message.strings(fd.number))
    if kind == T.TYPE_BYTES:
        return [bytes(field.value) for field in message.get_all(fd.number)]
    if kind in (
        T.TYPE_FIXED32,
        T.TYPE_SFIXED32,
        T.TYPE_FLOAT,
        T.TYPE_FIXED64,
        T.TYPE_SFIXED64,
        T.TYPE_DOUBLE,
    ):
        width = 4 if kind in (T.TYPE_FIXED32, T.TYPE_SFIXED32, T.TYPE_FLOAT) else 8
        code = {T.TYPE_FIXED32: "I", T.TYPE_SFIXED32: "i", T.TYPE_FLOAT: "f"}.get(kind) or {
            T.TYPE_FIXED64: "Q",
            T.TYPE_SFIXED64: "q",
            T.TYPE_DOUBLE: "d",
        }[kind]
        out: list[object] = []
        for field in message.get_all(fd.number):
            raw = (
                bytes(field.value)
                if isinstance(field.value, memoryview)
                else field.value.to_bytes(width, "little")
            )
            out += [v for (v,) in struct.iter_unpack("<" + code, raw)]
        return out
    values = message.packed_uints(fd.number)
    if kind in (T.TYPE_INT32, T.TYPE_INT64, T.TYPE_ENUM):
        return [signed(v) for v in values]
    if kind in (T.TYPE_SINT32, T.TYPE_SINT64):
        return [zigzag(v) for v in values]
    if kind == T.TYPE_BOOL:
        return [v != 0 for v in values]
    return list(values)


def _same_scalar(fd: Any, ours: object, theirs: object) -> bool:
    if fd.type == T.TYPE_FLOAT:
        return struct.pack("<f", ours) == struct.pack("<f", theirs)
    if fd.type == T.TYPE_DOUBLE:
        return struct.pack("<d", ours) == struct.pack("<d", theirs)
    return ours == theirs


def assert_same(ours: Message, theirs: Any, where: str = "") -> int:
    """Assert the walker sees exactly what protobuf parsed, field by field; count the fields."""
    descriptor = theirs.DESCRIPTOR
    listed = {fd.number: (fd, value) for fd, value in theirs.ListFields()}
    checked = 0
    for number in ours.numbers():
        fd = descriptor.fields_by_number.get(number)
        assert fd is not None, f"{where}.{number}: unknown to the schema"
        if number not in listed:  # implicit presence: written, but equal to the default
            assert fd.message_type is None and not fd.is_repeated
            assert _same_scalar(fd, _scalar(ours, fd), fd.default_value), f"{where}.{number}"
    for number, (fd, value) in listed.items():
        path = f"{where}.{number}"
        checked += 1
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd = fd.message_type.fields_by_number[1]
            value_fd = fd.message_type.fields_by_number[2]
            entries = {_scalar(entry, key_fd): entry for entry in ours.messages(number)}
            assert set(entries) == set(value), path
            for key, entry in entries.items():
                if value_fd.message_type is None:
                    assert _same_scalar(value_fd, _scalar(entry, value_fd), value[key]), path
                else:
                    kid = entry.message(2)
                    checked += assert_same(kid or Message(b""), value[key], f"{path}[{key}]")
        elif fd.message_type is not None and fd.is_repeated:
            kids = ours.messages(number)
            assert len(kids) == len(value), path
            for i, (kid, theirs_kid) in enumerate(zip(kids, value, strict=True)):
                checked += assert_same(kid, theirs_kid, f"{path}[{i}]")
        elif fd.message_type is not None:
            kid = ours.message(number)
            assert kid is not None, path
            checked += assert_same(kid, value, path)
        elif fd.is_repeated:
            ours_values = _repeated_scalars(ours, fd)
            assert len(ours_values) == len(value), path
            assert all(_same_scalar(fd, a, b) for a, b in zip(ours_values, value, strict=True)), (
                path
            )
        else:
            assert _same_scalar(fd, _scalar(ours, fd), value), f"{path}: {_scalar(ours, fd)!r}"
    return checked


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(everythings())
def test_walker_reads_what_protobuf_wrote(message: Any) -> None:
    data = message.SerializeToString()
    assert_same(Message(data), message)
    # The careful walk agrees with the view, and the fields tile the buffer.
    fields = list(iter_fields(data))
    assert fields == list(Message(data).fields())
    assert all(a.offset < b.offset for a, b in itertools.pairwise(fields))
    assert not fields or fields[0].offset == 0
    assert exercise(Message(data)) >= 0


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(everythings(), everythings())
def test_concatenation_is_a_merge_and_last_scalar_wins(first: Any, second: Any) -> None:
    everything, _ = pw_classes()
    merged = everything()
    merged.MergeFromString(first.SerializeToString() + second.SerializeToString())
    ours = Message(first.SerializeToString() + second.SerializeToString())
    for fd in merged.DESCRIPTOR.fields:
        if fd.message_type is None and not fd.is_repeated:
            assert _same_scalar(fd, _scalar(ours, fd), getattr(merged, fd.name)), fd.name
        elif fd.is_repeated and fd.message_type is None:
            got = _repeated_scalars(ours, fd)
            assert all(
                _same_scalar(fd, a, b) for a, b in zip(got, getattr(merged, fd.name), strict=True)
            ), fd.name


# -- fuzzing: only DecodeError escapes ----------------------------------------------------------


@settings(max_examples=600)
@given(st.binary(max_size=200), st.integers(0, 2**40))
def test_random_bytes_raise_only_decode_errors(data: bytes, base: int) -> None:
    exercise(Message(data, base_offset=base))
    try:
        for field in iter_fields(data, base):
            assert field.offset >= base
    except DecodeError as exc:
        assert exc.offset is not None and exc.offset >= base
    for pos in (-1, 0, len(data) // 2, len(data)):
        with contextlib.suppress(DecodeError):
            decode_varint(data, pos)


@st.composite
def messagey_bytes(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Bytes that are mostly well-formed messages, so the fuzzer gets past the first field."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        number = draw(st.sampled_from([1, 2, 3, 15, 16, 140, 2047, 2048, MAX_FIELD_NUMBER]))
        kind = draw(st.sampled_from(["varint", "len", "msg", "f32", "f64", "junk"]))
        if kind == "varint":
            parts.append(f_varint(number, draw(st.integers(-(2**63), U64))))
        elif kind == "len":
            parts.append(f_len(number, draw(st.binary(max_size=20))))
        elif kind == "msg" and depth < 4:
            parts.append(f_len(number, draw(messagey_bytes(depth + 1))))
        elif kind == "f32":
            parts.append(f_fixed32(number, draw(uint32s)))
        elif kind == "f64":
            parts.append(f_fixed64(number, draw(uint64s)))
        else:
            parts.append(draw(st.binary(max_size=4)))
    return b"".join(parts)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messagey_bytes())
def test_structured_random_messages_raise_only_decode_errors(data: bytes) -> None:
    exercise(Message(data))


Mutation = tuple[str, int, int]
mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "truncate", "insert", "delete"]),
        st.integers(0, 1 << 16),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, changes: list[Mutation]) -> bytes:
    out = bytearray(data)
    for kind, where, byte in changes:
        pos = where % (len(out) + 1)
        if kind == "flip" and pos < len(out):
            out[pos] ^= 1 << (byte % 8)
        elif kind == "set" and pos < len(out):
            out[pos] = byte
        elif kind == "truncate":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = bytes([byte])
        elif kind == "delete":
            del out[pos : pos + 1 + byte % 4]
    return bytes(out)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100), mutations)
def test_mutated_real_payloads_raise_only_decode_errors(
    which: int, changes: list[Mutation]
) -> None:
    originals = all_payloads()
    data = mutate(originals[which % len(originals)], changes)
    exercise(Message(data))


def test_every_truncation_of_the_real_payloads() -> None:
    for data in all_payloads():
        for cut in range(len(data)):
            message = Message(data[:cut])
            try:
                message.fields()
            except DecodeError as exc:
                assert exc.offset is not None and 0 <= exc.offset < cut
            exercise(message)


# -- the real payloads ---------------------------------------------------------------------------


@cache
def step_class() -> Any:
    """`gemini_coder.Step` from agy's real schema, in a pool of its own (AGY-FORMATS §5)."""
    pool = load_descriptor_set(REFERENCE / "schema" / "antigravity_schema.fds")
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gemini_coder.Step"))


# How many fields (at every depth) protobuf finds in each payload, all of which the walker matches.
STEP_PAYLOADS = {PONG: 50, USER_PONG: 149, RUN_COMMAND: 54, OLD_USER: 10, PREFIX_ONLY: 49}


@pytest.mark.parametrize("name", sorted(STEP_PAYLOADS))
def test_real_payloads_match_protobuf_field_by_field(name: str) -> None:
    data = payload(name)
    theirs = step_class().FromString(data)
    assert assert_same(Message(data), theirs) == STEP_PAYLOADS[name]


def test_real_embedded_step_matches_protobuf() -> None:
    data = payload(RUN_COMMAND)
    any_value = Message(data).path(140, 2, 6)
    assert any_value is not None
    embedded = step_class().FromString(any_value.bytes_(2))
    legacy = any_value.message(2)
    assert legacy is not None
    assert assert_same(legacy, embedded) == 54


def test_real_old_metadata_column_is_the_payloads_field_5() -> None:
    metadata = payload(OLD_USER_METADATA)
    step = Message(payload(OLD_USER))
    field = step.get(5)
    assert field is not None
    assert bytes(field.value) == metadata
    assert Message(metadata).path_uint(1, 1) == 1754820000
    assert Message(metadata).uint(3) == 4  # USER_EXPLICIT
    assert step.path_string(19, 2) == "Fix the flaky test"
    assert [item.string(1) for item in must(step.path(19)).messages(3)] == ["Fix the flaky test"]


def test_real_assistant_pong() -> None:
    step = Message(payload(PONG))
    assert [(f.number, f.wire_type) for f in step.fields()] == [(1, 0), (4, 0), (5, 2), (20, 2)]
    assert step.uint(1) == 15
    assert step.uint(4) == 3
    assert step.path_string(20, 1) == "PONG"
    assert step.path_string(20, 8) == "PONG"
    assert not must(step.path(20)).has(3)  # no thinking on this turn
    assert must(step.path(20)).numbers() == {1, 6, 8, 12, 14}
    assert step.path_uint(20, 12) == 2
    usage = step.path(5, 9)
    assert usage is not None
    assert usage.numbers() == {1, 2, 3, 6, 7, 8, 10, 11}
    assert (usage.uint(2), usage.uint(3), usage.uint(5), usage.uint(10)) == (13901, 2, 0, 2)
    assert usage.string(7) == step.path_string(20, 6) == "bot-2fe64199-e207-4231-ac2a-cbe3ed68bc43"
    assert step.path_string(5, 20, 4) == "8724cd98-6b07-4080-82d3-1c617be236bf"
    assert step.path_uint(5, 20, 2) == 1
    transitions = step.path(5, 26)
    assert transitions is not None
    assert [t.uint(1) for t in transitions.messages(1)] == [8, 3]  # GENERATING, then DONE


def test_real_user_pong() -> None:
    step = Message(payload(USER_PONG))
    assert step.uint(1) == 14
    assert step.path_string(19, 2) == "Reply with exactly: PONG"
    assert must(step.path(19)).numbers() == {2, 3, 4, 12, 18}
    assert not must(step.path(5)).has(9)  # a user turn has no usage


def test_real_run_command() -> None:
    data = payload(RUN_COMMAND)
    step = Message(data)
    assert step.uint(1) == 132
    assert step.uint(4) == 3
    call = step.path(5, 4)
    assert call is not None
    assert call.string(2) == "run_command"
    assert json.loads(call.string(3))["CommandLine"] == "printenv ANTIGRAVITY_SESSION_ID"
    args = {entry.string(1): entry.string(2) for entry in must(step.path(140)).messages(1)}
    assert args["CommandLine"] == "printenv ANTIGRAVITY_SESSION_ID"
    assert step.path_string(140, 2, 1) == (
        "\nThe command exited with code 0.\nOutput:\nwitness-session-abc123\r\n\n"
    )
    cascade = step.path_string(5, 20, 4)
    assert cascade == "2bd57d90-ab1d-44fe-ac40-33e21a699689"
    assert cascade in step.path_string(140, 2, 7)

    any_value = step.path(140, 2, 6)
    assert any_value is not None
    assert any_value.numbers() == {1, 2}
    assert any_value.string(1) == "type.googleapis.com/gemini_coder.Step"
    legacy = any_value.message(2)
    assert legacy is not None
    assert legacy.depth == 4
    assert legacy.uint(1) == 21  # RUN_COMMAND
    assert legacy.uint(4) == 3
    run = legacy.message(28)
    assert run is not None
    assert run.has(6)  # the exit code is written even when it is 0
    assert run.int(6) == 0
    assert run.path_string(21, 1) == "witness-session-abc123\r\n"
    assert run.string(23) == "printenv ANTIGRAVITY_SESSION_ID"
    assert run.string(2) == "/home/node/.gemini/antigravity-cli/scratch"
    # Offsets inside the embedded step are absolute in the row's blob.
    field = run.get(23)
    assert field is not None
    assert data[field.offset : field.offset + 2] == b"\xba\x01"  # tag of field 23, LEN


def test_real_prefix_only_payload() -> None:
    """The 1.1.9 planner blob is a prefix, but it was cut exactly after field 5: it holds fields
    1, 4 and a complete 5, and no trace of field 20 (MANIFEST.json says "field 20 truncated").
    So it decodes cleanly; the walk only fails where a string is mistaken for a message."""
    data = payload(PREFIX_ONLY)
    step = Message(data)
    assert [(f.number, f.offset) for f in step.fields()] == [(1, 0), (4, 2), (5, 4)]
    assert len(data) == 4 + 3 + 327  # the tag and length of field 5, then its 327 bytes
    assert step.uint(1) == 15
    assert step.message(20) is None
    assert step.path_string(20, 1) == ""
    usage = step.path(5, 9)
    assert usage is not None
    assert (usage.uint(2), usage.uint(3), usage.uint(5), usage.uint(9), usage.uint(10)) == (
        9062,
        3569,
        61165,
        2689,
        880,
    )
    # A schema-blind recursive walk fails exactly at the strings, each read as a message.
    failures: list[tuple[str, int | None]] = []

    def walk(message: Message, path: str) -> None:
        for number in sorted(message.numbers()):
            if any(field.wire_type != LEN for field in message.get_all(number)):
                continue
            for kid in message.messages(number):
                try:
                    kid.fields()
                except DecodeError as exc:
                    failures.append((f"{path}{number}", exc.offset))
                    continue
                walk(kid, f"{path}{number}.")

    walk(step, "")
    assert failures == [
        ("5.9.8.1", 86),  # "sessionID": 's' reads as field 14, wire type 3 (a group)
        ("5.9.8.2", 102),  # "-3750763034362895579": wire type 7
        ("5.9.11", 125),  # the response id
        ("5.12", 153),  # the execution id
        ("5.20.1", 199),  # the trajectory id: 'b' reads as field 12 LEN, 51 bytes long
        ("5.20.4", 243),  # the cascade id
    ]
    # Cut anywhere inside field 5 (past its length), it fails at field 5's tag.
    for cut in range(7, len(data)):
        with pytest.raises(DecodeError, match="field 5") as info:
            Message(data[:cut]).uint(1)
        assert info.value.offset == 4


def test_module_surface() -> None:
    assert set(protowire.__all__) == {
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
    }
    assert (VARINT, I64, LEN, SGROUP, EGROUP, I32) == (0, 1, 2, 3, 4, 5)
    assert MAX_VARINT_BYTES == 10
    assert MAX_DEPTH == 64
