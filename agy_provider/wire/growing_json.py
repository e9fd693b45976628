"""A stream's large JSON frames parsed again without parsing again the long strings an earlier frame held.

Owns `GrowingJson`: per member, the raw bytes of the long string last parsed and its text (a cache of facts).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any
from typing import Final

from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext

__all__ = ["LARGE_FRAME", "LONG_STRING", "GrowingJson"]

# A frame smaller than this is parsed whole: the scan below costs a Python step per string, which
# only pays when most of the frame's bytes are in a few long strings (an answer, twice).
LARGE_FRAME: Final = 64 * 1024
# A member value at least this long (raw bytes between its quotes) is parsed on its own and
# remembered; shorter strings stay in the skeleton that `jsontext.loads` parses.
LONG_STRING: Final = 8 * 1024
# Past this many strings the frame is a list of many small things (a resumed conversation's
# replay), not an answer: the scan stops and the frame is parsed whole, as without the cache.
MAX_STRINGS: Final = 2000
# A key name longer than this is not remembered (agy's member names are short identifiers).
_MAX_NAME: Final = 128

_BACKSLASH: Final = 0x5C
_JSON_SPACE: Final = b" \t\r\n"
_SPACE: Final = re.compile(rb"[ \t\r\n]*")


class GrowingJson:
    """What the previous large frame's long strings were, so the next frame that repeats them,
    grown, pays for what grew rather than for the whole answer again.

    agy's `StreamAgentStateUpdates` sends a growing planner step again with every change, each
    time with the whole answer so far, twice (`response` and `modifiedResponse`). Each entry
    records that member `name` (its n-th value in the frame) held raw bytes B, which parse to
    text T. When that member's new raw bytes start with B (one `memcmp`, no copy), the new text
    is T plus the parse of the new bytes alone: B was a whole string's content, so it ends
    between two escapes, and JSON parses each escape on its own except a surrogate pair (an
    entry whose text ends with a high surrogate is never extended). Anything else is parsed whole.

    What is not a long string (the frame's structure, its numbers, short strings, keys) goes
    through `jsontext.loads` as a skeleton in which each long string is a placeholder, so every
    guarantee of `jsontext` holds for it; each long string is parsed by `json` as `jsontext`
    would, strict UTF-8 and lone surrogates repaired. Any frame the fast path cannot take (not
    an object, broken, too many strings) is parsed whole by `jsontext.loads`, which then gives
    the value or the precise error: the result is always what `jsontext.loads` gives.

    `decoded` and `compared` count the raw bytes of long strings parsed and compared over the
    cache's life (tests hold the parse to "cost follows the growth" with them).
    """

    __slots__ = ("_known", "_nonce", "compared", "decoded")

    def __init__(self) -> None:
        # (member name, its occurrence in the frame) -> (frame, start, size, text, ends_high)
        self._known: dict[tuple[bytes, int], tuple[bytes, int, int, str, bool]] = {}
        # Placeholders carry a secret, so a frame does not spell one by chance; one that did
        # would only make the count of placeholders filled wrong, and the frame parsed whole.
        self._nonce = secrets.token_hex(8)
        self.decoded = 0
        self.compared = 0

    def loads(self, data: bytes, what: str = "JSON", offset: int | None = None) -> Any:
        """`jsontext.loads(data, what, offset)`, reusing the long strings of the previous frame."""
        if type(data) is not bytes or len(data) < LARGE_FRAME:
            return jsontext.loads(data, what, offset)
        try:
            value = self._parse(data)
        except (DecodeError, ValueError, RecursionError, IndexError):
            value = None  # whatever the fast path trips on, the whole parse judges
        if value is None:
            self._known = {}
            return jsontext.loads(data, what, offset)  # the value, or the canonical error
        return value

    def _parse(self, data: bytes) -> Any:
        """The frame's value, or None when it is not for the fast path (then parsed whole)."""
        space = _SPACE.match(data)
        start = space.end() if space else 0
        if data[start : start + 1] != b"{":
            return None
        known, fresh = self._known, {}
        pieces: list[bytes] = []
        texts: dict[str, str] = {}
        longs: list[tuple[int, int, str, bool]] = []  # this frame's long strings, as parsed
        seen: dict[bytes, int] = {}
        piece_from = 0  # where the skeleton's current piece of `data` starts
        name: bytes | None = None  # the last key read, while its value is next
        after = 0  # just past the last string
        strings = 0
        pos = data.find(b'"', start)
        while pos >= 0:
            strings += 1
            if strings > MAX_STRINGS:
                return None
            gap = data[after:pos].rstrip(_JSON_SPACE)
            is_value = gap.endswith(b":")
            content = pos + 1
            slot: tuple[bytes, int] | None = None
            entry = None
            if is_value and name is not None:
                count = seen.get(name, 0)
                seen[name] = count + 1
                slot = (name, count)
                entry = known.get(slot)
            # agy's `modifiedResponse` is most often `response` again: the same bytes are the
            # same text, one `memcmp` instead of a second copy (and no second compare or scan).
            twin = _twin(data, content, longs) if is_value and longs else None
            resume = content
            if twin is not None:
                close = content + twin[0]
                self.compared += twin[0]
            else:
                if entry is not None:
                    old, old_start, old_size, _, ends_high = entry
                    if not ends_high and data.startswith(
                        memoryview(old)[old_start : old_start + old_size], content
                    ):
                        resume = content + old_size
                        self.compared += old_size
                    else:
                        entry = None
                close = _closing_quote(data, resume)
            after = close + 1
            if not is_value:
                name = data[content:close] if close - content <= _MAX_NAME else None
                pos = data.find(b'"', after)
                continue
            name = None
            if close - content >= LONG_STRING:
                if twin is not None:
                    text, ends_high = twin[1], twin[2]
                else:
                    text, ends_high = self._text(data, content, close, resume, entry)
                longs.append((content, close - content, text, ends_high))
                placeholder = f"\x00{self._nonce}#{len(texts)}"
                texts[placeholder] = text
                pieces.append(data[piece_from:pos])
                pieces.append(json.dumps(placeholder).encode("ascii"))
                piece_from = after
                if slot is not None:
                    fresh[slot] = (data, content, close - content, text, ends_high)
            pos = data.find(b'"', after)
        if not texts:
            return None  # no long string: nothing to gain, parsed whole
        pieces.append(data[piece_from:])
        value = jsontext.loads(b"".join(pieces))
        if _fill(value, texts) != len(texts):
            return None
        self._known = fresh
        return value

    def _text(
        self,
        data: bytes,
        content: int,
        close: int,
        resume: int,
        entry: tuple[bytes, int, int, str, bool] | None,
    ) -> tuple[str, bool]:
        """The text of the string between `content` and `close` and whether its parse (before
        repair) ends with a high surrogate; only the bytes from `resume` on are parsed."""
        raw = _string(data, resume, close)
        self.decoded += close - resume
        if entry is None:
            return jsontext.clean_text(raw), _high(raw)
        old_text, old_high = entry[3], entry[4]
        if not raw:
            return old_text, old_high
        return old_text + jsontext.clean_text(raw), _high(raw)


def _closing_quote(data: bytes, pos: int) -> int:
    """Where the string whose content goes on at `pos` (between two escapes) ends: the next
    quote not escaped by an odd run of backslashes."""
    while True:
        quote = data.find(b'"', pos)
        if quote < 0:
            raise DecodeError("a string never ends", pos)
        back = quote - 1
        while data[back] == _BACKSLASH:  # stops at the opening quote at the latest
            back -= 1
        if (quote - 1 - back) % 2 == 0:
            return quote
        pos = quote + 1


def _string(data: bytes, start: int, end: int) -> str:
    """The JSON string content `data[start:end]` parsed, before lone-surrogate repair: strict
    UTF-8 first, as `jsontext.loads` decodes, then `json`'s own string rules (escapes, no raw
    control characters)."""
    if start == end:
        return ""
    value = json.loads('"' + data[start:end].decode("utf-8") + '"')
    assert isinstance(value, str)
    return value


def _twin(
    data: bytes, content: int, longs: list[tuple[int, int, str, bool]]
) -> tuple[int, str, bool] | None:
    """(size, text, ends_high) of an earlier long string of this frame whose very bytes the
    string at `content` holds, if any. Its bytes followed by a quote end this string there: the
    backslashes before that quote are the earlier string's, an even run, so it is not escaped."""
    for start, size, text, ends_high in longs:
        if data.startswith(memoryview(data)[start : start + size], content) and (
            data[content + size : content + size + 1] == b'"'
        ):
            return size, text, ends_high
    return None


def _high(text: str) -> bool:
    return bool(text) and "\ud800" <= text[-1] <= "\udbff"


def _fill(value: Any, texts: dict[str, str]) -> int:
    """Put each long string back where its placeholder is (member values only); the count put."""
    filled = 0
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if type(child) is str:
                if child.startswith("\x00") and child in texts:
                    node[key] = texts[child]
                    filled += 1
            elif isinstance(child, dict | list):
                stack.append(child)
    return filled
