"""A row's growing text fields decoded again without decoding again what an earlier read decoded.

Owns `GrowingTexts`: per field, the bytes last decoded and their text (a cache of facts, never a guess).
"""

from __future__ import annotations

from collections.abc import Hashable

from agy_provider.errors import DecodeError
from agy_provider.wire.protowire import LEN
from agy_provider.wire.protowire import Message
from agy_provider.wire.protowire import decode_varint

__all__ = ["GrowingTexts"]


class GrowingTexts:
    """What the previous decode of one row's strings found, so the next decode of that row pays
    for what grew, not for the whole text again.

    agy rewrites a planner row in place many times while the model writes, each time with the
    whole answer so far. Each entry records that bytes B decode to text T. When the field's new
    bytes start with B (one `memcmp` of B, no copy), the new text is T plus the decode of the new
    bytes alone: B decoded on its own, so it ends on a character boundary, and UTF-8 decodes
    each character on its own, so T + decode(rest) is exactly decode(B + rest), and the rest is
    valid UTF-8 exactly when the whole is (a failure names the same offset, same reason). Any
    other new value (shorter, rewritten, moved) is decoded whole, as without the cache.

    Bound to one payload at a time (`bind`): positions come from that payload's walk, and only
    a field whose bytes are a view of that very object, at the place its tag says, is compared.
    `decoded` and `compared` count UTF-8 bytes decoded and bytes compared over the whole life of
    the cache (tests hold the decoder to "cost follows the growth" with them).
    """

    __slots__ = ("_known", "_payload", "compared", "decoded")

    def __init__(self) -> None:
        # key -> (payload holding the bytes, where they start, how many, their text)
        self._known: dict[Hashable, tuple[bytes, int, int, str]] = {}
        self._payload: bytes | None = None
        self.decoded = 0
        self.compared = 0

    def bind(self, payload: bytes | None) -> GrowingTexts:
        """Take the next strings from `payload`, the buffer of a `Message(payload)` walk."""
        self._payload = payload if type(payload) is bytes else None
        return self

    def string(self, msg: Message, number: int, key: Hashable) -> str:
        """`msg.string(number)`, reusing what `key` decoded last time where its bytes are a prefix."""
        field = msg.get(number)
        if field is None or field.wire_type != LEN:
            return msg.string(number)  # the default, or the walker's precise error
        value = field.value
        assert isinstance(value, memoryview)
        size = len(value)
        start = self._start(value, field.number, field.offset)
        known = self._known.get(key)
        if start is not None and known is not None:
            old_payload, old_start, old_size, old_text = known
            payload = self._payload
            assert payload is not None
            if old_size <= size and payload.startswith(
                memoryview(old_payload)[old_start : old_start + old_size], start
            ):
                self.compared += old_size
                text = (
                    old_text
                    if old_size == size
                    else old_text + self._tail(value, old_size, number, start)
                )
                self._known[key] = (payload, start, size, text)
                return text
        text = msg.string(number)
        self.decoded += size
        if start is not None and self._payload is not None:
            self._known[key] = (self._payload, start, size, text)
        return text

    def _start(self, value: memoryview, number: int, offset: int) -> int | None:
        """Where `value` starts in the bound payload, proven from the field's own tag and length;
        None when it is not a view of that payload (then nothing is compared)."""
        payload = self._payload
        if payload is None or value.obj is not payload:
            return None
        try:
            tag, pos = decode_varint(payload, offset)
            size, pos = decode_varint(payload, pos)
        except DecodeError:
            return None
        if tag != (number << 3 | LEN) or size != len(value) or pos + size > len(payload):
            return None
        return pos

    def _tail(self, value: memoryview, old_size: int, number: int, start: int) -> str:
        try:
            tail = str(value[old_size:], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"field {number}: invalid UTF-8 ({exc.reason})", start + old_size + exc.start
            ) from None
        self.decoded += len(value) - old_size
        return tail
