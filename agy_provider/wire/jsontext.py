"""Strict JSON for untrusted bytes: finite numbers, well-formed text, bounded nesting, or `DecodeError`.

Owns the JSON layer under every JSON decoder (NDJSON lines, Connect frames, RPC captures); pure.

Python's `json` accepts things agy (a Go program) never writes and that break code further on:
`NaN`/`Infinity` and `1e400` (an infinite float: `int()` of it raises `OverflowError`, and a
re-encoded event is no longer JSON), `\\ud800` escapes (a lone surrogate: printing it raises
`UnicodeEncodeError`), and nesting deep enough that any later recursive walk overflows the stack.
`loads` turns all of those into `DecodeError` (lone surrogates into U+FFFD, like any invalid
text); `clean` does the same for a value someone else parsed (httpx's `response.json()`).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any
from typing import Final

from agy_provider.errors import DecodeError

__all__ = [
    "MAX_DEPTH",
    "clean",
    "clean_text",
    "finite_number",
    "integer",
    "loads",
    "locate_array",
    "value_end",
]

# The deepest value agy sends is an RPC step inside a stream update inside a tool's arguments:
# about a dozen levels. 200 leaves room for any tool argument a model writes, while staying far
# enough under Python's recursion limit (1000) that json.dumps, repr and our own walks of an
# accepted value can never overflow the stack, wherever they are called from.
MAX_DEPTH: Final = 200

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# A JSON `\uD800`–`\uDFFF` escape: the only way a lone surrogate reaches a parsed value when the
# bytes were strict UTF-8 (which cannot encode surrogates). An escaped backslash before `u` also
# matches; that only costs a walk that finds nothing.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def loads(data: bytes | str, what: str = "JSON", offset: int | None = None) -> Any:
    """Parse `data` (UTF-8 bytes or text) as strict JSON.

    Lone surrogates in strings become U+FFFD; everything else that is not plain JSON fails.

    Raises:
        DecodeError: not UTF-8, not JSON, a non-finite number, an integer over Python's
            4,300-digit limit, or nesting deeper than `MAX_DEPTH`. `what` names the input in
            the message and `offset` is passed on.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    # UnicodeDecodeError, JSONDecodeError and the int-digits limit are all ValueErrors; hostile
    # nesting like "[[[[…" overflows the parser's stack and must not escape as a RecursionError.
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"{what} is not valid JSON: {_brief(exc)}", offset) from exc
    try:
        if _SURROGATE_ESCAPE.search(text):
            return clean(value)  # copies, repairing strings; checks depth on the way
        # Bounded nesting, cheapest proof first: few brackets at all; else the bracket depth of
        # the raw text (an over-estimate: brackets inside strings count too); else a walk.
        if text.count("[") + text.count("{") > MAX_DEPTH:
            raw = data if isinstance(data, bytes) else text.encode("utf-8", "surrogatepass")
            if _bracket_depth(raw) > MAX_DEPTH:
                _check_depth(value)
    except DecodeError as exc:
        raise DecodeError(f"{what}: {exc}", offset) from exc
    return value


# Bracket bytes become +1 (opening) and -1 (closing, 0xff as a signed byte); every other byte is
# deleted first. The running sum's maximum is then computed in C, with no Python step per byte.
_BRACKET_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))


def _bracket_depth(raw: bytes) -> int:
    steps = raw.translate(None, _NOT_BRACKETS).translate(_BRACKET_STEPS)
    return max(itertools.accumulate(memoryview(steps).cast("b")), default=0)


def _check_depth(value: Any) -> None:
    """Raise `DecodeError` if containers nest deeper than `MAX_DEPTH` (iteratively; no copy)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DecodeError(f"JSON nests deeper than {MAX_DEPTH} levels")
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))


def clean(value: Any) -> Any:
    """A copy of a parsed JSON value with lone surrogates replaced, checked for depth and numbers.

    Never recurses (a hostile value cannot overflow the stack here). Containers come back as new
    dicts and lists; a value that needs no change may come back as itself.

    Raises:
        DecodeError: nesting deeper than `MAX_DEPTH`, a non-finite float, or a value that is not
            a JSON type.
    """
    if not isinstance(value, dict | list):
        return _scalar(value)
    root: list[Any] = [None]
    # Each entry: (source container, the container its copy goes into, key or index there, depth).
    work: list[tuple[Any, list[Any] | dict[str, Any], Any, int]] = [(value, root, 0, 1)]
    while work:
        source, parent, key, depth = work.pop()
        if depth > MAX_DEPTH:
            raise DecodeError(f"JSON nests deeper than {MAX_DEPTH} levels")
        if isinstance(source, dict):
            target_dict: dict[str, Any] = {}
            parent[key] = target_dict
            for k, v in source.items():
                if not isinstance(k, str):
                    raise DecodeError(f"object key is a {type(k).__name__}, not a string")
                k = clean_text(k)
                if isinstance(v, dict | list):
                    target_dict[k] = None
                    work.append((v, target_dict, k, depth + 1))
                else:
                    target_dict[k] = _scalar(v)
        else:
            target_list: list[Any] = [None] * len(source)
            parent[key] = target_list
            for i, v in enumerate(source):
                if isinstance(v, dict | list):
                    work.append((v, target_list, i, depth + 1))
                else:
                    target_list[i] = _scalar(v)
    return root[0]


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (valid text comes back as itself)."""
    if text.isascii() or not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise DecodeError(f"number {value} is not finite")
    if value is None or isinstance(value, bool | int | float):
        return value
    raise DecodeError(f"{type(value).__name__} is not a JSON value")


def _brief(exc: BaseException) -> str:
    """An exception's message, cut short: a hostile input must not make a megabyte warning."""
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"


# protobuf JSON writes int64 as a string and uint64 can reach 2**64 - 1; nothing agy counts
# (tokens, exit codes, step indexes) goes past that, and a bound keeps sums of such numbers far
# from Python's 4,300-digit limit on printing an int.
_INT_MIN: Final = -(2**63)
_INT_LIMIT: Final = 2**64
_INT_TEXT: Final = re.compile(r"\s*[-+]?[0-9]{1,20}\s*")


def integer(value: Any, what: str = "value") -> int:
    """A protobuf-JSON integer (a number or a decimal string) as an int, within 64 bits.

    Raises:
        DecodeError: not an integer (a fraction, infinity, NaN, a container, text that is not
            decimal digits) or out of the 64-bit range.
    """
    if isinstance(value, bool):
        raise DecodeError(f"{what} is a boolean, not an integer")
    if isinstance(value, int):
        number = value
    elif (isinstance(value, float) and math.isfinite(value) and value.is_integer()) or (
        isinstance(value, str) and _INT_TEXT.fullmatch(value)
    ):
        number = int(value)
    else:
        # Never repr() a container: a hostile one can be deep enough to overflow it.
        shown = repr(value[:40]) if isinstance(value, str) else type(value).__name__
        if isinstance(value, float):
            shown = repr(value)
        raise DecodeError(f"{what} is not an integer: {shown}")
    if not _INT_MIN <= number < _INT_LIMIT:
        raise DecodeError(f"{what} is out of range")
    return number


def finite_number(value: Any) -> float | None:
    """A JSON number (int or float) as a finite float; None for anything else.

    Total: an integer too large for a float (JSON has no bound: `duration_seconds` of 400 nines)
    is None rather than the `OverflowError` that `float()` and `math.isfinite` raise for it, and
    so are booleans, strings, containers, NaN and the infinities.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


# -- locating the elements of a large document without parsing it whole -------------------------

_STRUCTURE: Final = re.compile(rb'["\[\]{}]')
# The rest of a string after its opening quote; possessive, so a string that never ends costs one
# linear scan, not a scan from every later quote.
_STRING_TAIL: Final = re.compile(rb'(?:[^"\\]|\\.)*+"', re.DOTALL)
_WHITESPACE: Final = re.compile(rb"[ \t\r\n]*")
_SCALAR: Final = re.compile(rb"[^,:\[\]{}\s\"]+")


def _skip_ws(data: bytes, pos: int) -> int:
    match = _WHITESPACE.match(data, pos)
    return match.end() if match else pos


def _string_end(data: bytes, pos: int) -> int:
    match = _STRING_TAIL.match(data, pos + 1)
    if match is None:
        raise DecodeError("a string never ends", pos)
    return match.end()


def value_end(data: bytes, pos: int) -> int:
    """Where the JSON value starting at `pos` ends, from its structure alone.

    Only brackets and strings are followed (iteratively: any depth is fine); what is inside is
    for `loads` to judge. Raises `DecodeError` when the value never ends.
    """
    first = data[pos : pos + 1]
    if first == b'"':
        return _string_end(data, pos)
    if first in (b"[", b"{"):
        depth = 0
        while True:
            match = _STRUCTURE.search(data, pos)
            if match is None:
                raise DecodeError("an array or object never ends", pos)
            char = match.group()
            if char == b'"':
                pos = _string_end(data, match.start())
                continue
            depth += 1 if char in (b"[", b"{") else -1
            pos = match.end()
            if depth == 0:
                return pos
    scalar = _SCALAR.match(data, pos)
    if scalar is None:
        raise DecodeError("expected a JSON value", pos)
    return scalar.end()


def locate_array(data: bytes, key: str) -> list[tuple[int, int]] | None:
    """The (start, end) spans of the elements of the document's array: the document itself when
    it is an array, else its top-level member `key` when that is an array; None for any other
    object (parse it whole with `loads`).

    Memory stays a few words per element, whatever the document's size; each span can then be
    parsed on its own with `loads(data[start:end])`. Raises `DecodeError` when the document's
    structure is broken (unterminated, junk between elements or after the end).
    """
    pos = _skip_ws(data, 0)
    first = data[pos : pos + 1]
    if first == b"[":
        spans, end = _elements(data, pos)
    elif first == b"{":
        found, end = _member(data, pos, key)
        if found is None:
            return None
        spans = found
    else:
        raise DecodeError("not a JSON array or object", pos)
    if _skip_ws(data, end) != len(data):
        raise DecodeError("data after the end of the document", end)
    return spans


def _elements(data: bytes, pos: int) -> tuple[list[tuple[int, int]], int]:
    spans: list[tuple[int, int]] = []
    pos = _skip_ws(data, pos + 1)
    if data[pos : pos + 1] == b"]":
        return spans, pos + 1
    while True:
        end = value_end(data, pos)
        spans.append((pos, end))
        pos, closed = _after_item(data, end, b"]", "an array element")
        if closed:
            return spans, pos


def _member(data: bytes, pos: int, key: str) -> tuple[list[tuple[int, int]] | None, int]:
    found: list[tuple[int, int]] | None = None
    pos = _skip_ws(data, pos + 1)
    if data[pos : pos + 1] == b"}":
        return None, pos + 1
    while True:
        if data[pos : pos + 1] != b'"':
            raise DecodeError("expected a member name", pos)
        name_end = _string_end(data, pos)
        name = loads(data[pos:name_end], "a member name", pos)
        pos = _skip_ws(data, name_end)
        if data[pos : pos + 1] != b":":
            raise DecodeError("expected : after a member name", pos)
        pos = _skip_ws(data, pos + 1)
        if name == key and data[pos : pos + 1] == b"[":
            found, end = _elements(data, pos)  # a repeated member: the last one wins, as in JSON
        else:
            end = value_end(data, pos)
        pos, closed = _after_item(data, end, b"}", "an object member")
        if closed:
            return found, pos


def _after_item(data: bytes, end: int, close: bytes, what: str) -> tuple[int, bool]:
    """Past the separator after an element or member ending at `end`: (where the next one starts,
    False), or (just past `close`, True) when the array or object ends there."""
    pos = _skip_ws(data, end)
    separator = data[pos : pos + 1]
    if separator == close:
        return pos + 1, True
    if separator != b",":
        raise DecodeError(f"expected , or {close.decode()} after {what}", pos)
    return _skip_ws(data, pos + 1), False
