"""The session store's file layout, one record per line, read and rewritten a line at a time:
a lookup parses only its own line, and a save copies every line it does not change as bytes.

The layout is JSON as a whole (`{"sessions": {...}, "version": 1}`), written by `store_text`.
A record's line never holds a raw newline (JSON escapes them), so `\\n    "<key>": ` starts
exactly one line. Any other layout of the same JSON (an older version's indented file, a file
edited by hand) is read by parsing it whole, and the next save writes this one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext

__all__ = [
    "Buffer",
    "conversation_lines",
    "encode_line",
    "find_line",
    "is_line_layout",
    "iter_lines",
    "parse_line",
    "rewrite",
    "store_text",
]

# The file as read: bytes, or an mmap of it (which `find`, slicing and `re` take alike).
Buffer = Any

HEADER = b'{\n  "sessions": {\n'
FOOTER = b'\n  },\n  "version": 1\n}\n'
EMPTY = b'{\n  "sessions": {},\n  "version": 1\n}\n'
INDENT = b"    "
SEPARATOR = b",\n"

_UPDATED_AT = re.compile(rb'"updated_at": (-?[0-9][0-9.eE+-]*)')


def encode_line(key: str, record: Mapping[str, Any]) -> bytes:
    """A record's line (`json`'s C encoder: an indented dump goes through its pure-Python one)."""
    return f"    {json.dumps(key)}: {json.dumps(record, sort_keys=True)}".encode("ascii")


def store_text(lines: Sequence[bytes]) -> bytes:
    """The whole file holding `lines`."""
    return HEADER + SEPARATOR.join(lines) + FOOTER if lines else EMPTY


def is_line_layout(buf: Buffer, *, whole: bool = False) -> bool:
    """Whether `buf` is a file `store_text` wrote (its frame, and a first record on one line).
    `whole` also checks that no line is indented deeper than a record's (a record over several
    lines, edited by hand): a save that rewrites lines checks it, a lookup need not."""
    size = len(buf)
    if size == len(EMPTY) and buf[:size] == EMPTY:
        return True
    if size < len(HEADER) + len(FOOTER) or buf[: len(HEADER)] != HEADER:
        return False
    if buf[size - len(FOOTER) :] != FOOTER:
        return False
    end = buf.find(b"\n", len(HEADER))
    first: bytes = buf[len(HEADER) : end]
    if not (first.startswith(INDENT + b'"') and first.endswith((b"}", b"},"))):
        return False
    return not whole or buf.find(b"\n" + INDENT + b" ", len(HEADER)) < 0


def find_line(buf: Buffer, key: str) -> tuple[int, int] | None:
    """Where `key`'s line is in a file of this layout: (its start, the newline after it; a
    trailing comma included), or None."""
    at = buf.find(b"\n" + INDENT + json.dumps(key).encode("ascii") + b": ")
    if at < 0:
        return None
    return at + 1, buf.find(b"\n", at + 1)


def parse_line(line: bytes) -> tuple[str, Any]:
    """The key and the value a line holds. Raises DecodeError when it is not one JSON member."""
    member = jsontext.loads(b"{" + line.rstrip(b",") + b"}", what="its record")
    if not isinstance(member, dict) or len(member) != 1:
        raise DecodeError("a record's line holds more than one record")
    ((key, value),) = member.items()
    return key, value


def iter_lines(buf: Buffer) -> Iterator[bytes]:
    """Every record's line of a file of this layout (for a listing of all of them)."""
    if len(buf) == len(EMPTY) and buf[:] == EMPTY:
        return
    body = buf[len(HEADER) : len(buf) - len(FOOTER)]
    for line in body.split(b"\n"):
        yield line.rstrip(b",")


def conversation_lines(buf: Buffer, prefix: str) -> list[tuple[float, int, int]]:
    """The lines whose key starts with `prefix`: (their `updated_at`, 0 when unreadable, start,
    end). Bounded by the store's own bound on such records."""
    found = []
    pattern = re.compile(rb"\n(" + re.escape(INDENT + json.dumps(prefix)[:-1].encode()) + rb")")
    for match in pattern.finditer(buf):
        start = match.start(1)
        end = buf.find(b"\n", start)
        stamp = _UPDATED_AT.search(buf, start, end)
        try:
            updated = float(stamp.group(1)) if stamp else 0.0
        except ValueError:
            updated = 0.0
        found.append((updated, start, end))
    return found


def rewrite(buf: Buffer, drop: Sequence[tuple[int, int]], add: Sequence[bytes]) -> list[Any]:
    """The file `buf` (of this layout) without the lines at `drop` and with the lines `add` at
    its end, as pieces to write one after another: every kept line is a slice of `buf`."""
    view = memoryview(buf)
    end_of_body = len(buf) - len(FOOTER)
    kept: list[Any] = []
    cursor = len(HEADER)
    if not (len(buf) == len(EMPTY) and buf[:] == EMPTY):
        for start, end in sorted(drop):
            if start > cursor:
                kept.append(_without_comma(view, cursor, start - 1))
            cursor = end + 1  # past the line's newline
        if cursor < end_of_body:
            kept.append(view[cursor:end_of_body])
    pieces = [*kept, *add]
    if not pieces:
        return [EMPTY]
    out: list[Any] = [HEADER]
    for number, piece in enumerate(pieces):
        if number:
            out.append(SEPARATOR)
        out.append(piece)
    out.append(FOOTER)
    return out


def _without_comma(view: memoryview, start: int, end: int) -> memoryview:
    """Lines `start`..`end` of the body, less the comma that joined them to a dropped line."""
    if end > start and view[end - 1] == ord(","):
        end -= 1
    return view[start:end]
