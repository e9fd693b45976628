"""serve's request bodies: JSON read defensively — bad UTF-8, nesting deeper than any API
needs, numbers past Python's digit limit and non-objects are `BodyError`s (a 400), never a 500.

Large bodies are parsed in a worker thread, so a 4 MiB transcript never stalls the loop.
"""

from __future__ import annotations

import json
from typing import Any

from agy_provider.workers import off_loop

__all__ = ["MAX_DEPTH", "BodyError", "parse_body"]

# Nesting deeper than this is refused: the deepest real request (a tool's JSON Schema inside a
# request) is a few dozen levels; Python's own recursion (json, jsonschema, the encoder that
# hands a schema to agy) gives out near 1,000.
MAX_DEPTH = 128
# Bodies larger than this are parsed off the event loop (parsing runs at ~100 MB/s).
_INLINE_BYTES = 64 * 1024


class BodyError(ValueError):
    """A body that is not a JSON object serve can read; the message says what to fix."""


async def parse_body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object. Raises `BodyError`."""
    if len(raw) > _INLINE_BYTES:
        return await off_loop(_parse, raw)
    return _parse(raw)


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"the body is not UTF-8 text (byte {exc.start}); send JSON") from exc
    try:
        body = json.loads(text)
    except RecursionError as exc:
        raise BodyError(f"the body nests deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        raise BodyError(f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BodyError("the body must be a JSON object")
    if _depth_over(body, MAX_DEPTH):
        raise BodyError(f"the body nests deeper than {MAX_DEPTH} levels")
    return body


def _depth_over(value: Any, bound: int) -> bool:
    """True when `value` nests lists and objects more than `bound` deep (iteratively: the
    check itself must not recurse)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > bound:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False
