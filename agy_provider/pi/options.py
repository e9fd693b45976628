"""The options a turn takes: pi's StreamOptions and SimpleStreamOptions, thinking budgets.

Owns their camelCase JSON (as in `types`) and the `AbortSignal` that cancels a turn from any thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias

from agy_provider.pi._pijson import (
    JsonDict,
    _jnum,
    _obj,
    _opt_dict,
    _opt_int,
    _opt_literal,
    _opt_num,
    _opt_str,
    _put,
)

if TYPE_CHECKING:
    # asyncio costs a host that only builds options more than the rest of pi's types: `wait`,
    # the one user at run time, imports it from a running loop, where it is loaded already.
    import asyncio

__all__ = [
    "AbortSignal",
    "CacheRetention",
    "SimpleStreamOptions",
    "StreamOptions",
    "ThinkingBudgets",
    "ThinkingLevel",
    "Transport",
]

ThinkingLevel: TypeAlias = Literal["minimal", "low", "medium", "high", "xhigh"]
CacheRetention: TypeAlias = Literal["none", "short", "long"]
Transport: TypeAlias = Literal["sse", "websocket", "websocket-cached", "auto"]


# --- abort -------------------------------------------------------------------------------------


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AbortSignal:
    """A one-way flag that cancels a turn, like the web's AbortSignal.

    `abort()` may be called from any thread; every coroutine in `wait()` wakes on its own loop.
    """

    __slots__ = ("_aborted", "_lock", "_reason", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._reason: object = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def aborted(self) -> bool:
        """True once `abort()` has been called."""
        return self._aborted

    @property
    def reason(self) -> object:
        """What `abort()` was given, or None."""
        return self._reason

    def abort(self, reason: object = None) -> None:
        """Raise the flag and wake every waiter. Later calls change nothing."""
        with self._lock:
            if self._aborted:
                return
            self._reason = reason
            self._aborted = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A closed loop raises here; nothing on it can still be waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    async def wait(self) -> None:
        """Return once the signal is aborted (at once if it already is)."""
        import asyncio

        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._aborted:
                return
            self._waiters.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self._aborted}, reason={self._reason!r})"


# --- options -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThinkingBudgets:
    """Token budgets per thinking level, for providers that budget thinking in tokens."""

    minimal: int | None = None
    low: int | None = None
    medium: int | None = None
    high: int | None = None

    def to_json(self) -> JsonDict:
        out: JsonDict = {}
        for key in ("minimal", "low", "medium", "high"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        d = _obj(data, "thinking budgets")
        return cls(
            *(_opt_int(d, key, "thinking budgets") for key in ("minimal", "low", "medium", "high"))
        )


# (python field, pi key) for StreamOptions' JSON-valued fields; `signal` and pi's callbacks
# (onPayload, onResponse) are live objects and have no JSON form.
_STREAM_OPTION_KEYS = (
    ("temperature", "temperature"),
    ("max_tokens", "maxTokens"),
    ("api_key", "apiKey"),
    ("transport", "transport"),
    ("cache_retention", "cacheRetention"),
    ("session_id", "sessionId"),
    ("headers", "headers"),
    ("timeout_ms", "timeoutMs"),
    ("max_retries", "maxRetries"),
    ("max_retry_delay_ms", "maxRetryDelayMs"),
    ("metadata", "metadata"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """Options every pi provider accepts; `signal` aborts the turn. `api_key` stays out of repr."""

    temperature: float | None = None
    max_tokens: int | None = None
    signal: AbortSignal | None = field(default=None, compare=False)
    api_key: str | None = field(default=None, repr=False)
    transport: Transport | None = None
    cache_retention: CacheRetention | None = None
    session_id: str | None = None
    headers: Mapping[str, str] | None = None
    timeout_ms: int | None = None
    max_retries: int | None = None
    max_retry_delay_ms: int | None = None
    metadata: Mapping[str, Any] | None = None

    def to_json(self) -> JsonDict:
        """pi's JSON for the options, without `signal` (a live object)."""
        out: JsonDict = {}
        for attr, key in _STREAM_OPTION_KEYS:
            value = getattr(self, attr)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, float):
                value = _jnum(value)
            _put(out, key, value)
        return out

    @classmethod
    def _fields_from_json(cls, d: Mapping[str, Any], what: str) -> JsonDict:
        return {
            "temperature": _opt_num(d, "temperature", what),
            "max_tokens": _opt_int(d, "maxTokens", what),
            "api_key": _opt_str(d, "apiKey", what),
            "transport": _opt_literal(d, "transport", what, Transport),
            "cache_retention": _opt_literal(d, "cacheRetention", what, CacheRetention),
            "session_id": _opt_str(d, "sessionId", what),
            "headers": _opt_dict(d, "headers", what),
            "timeout_ms": _opt_int(d, "timeoutMs", what),
            "max_retries": _opt_int(d, "maxRetries", what),
            "max_retry_delay_ms": _opt_int(d, "maxRetryDelayMs", what),
            "metadata": _opt_dict(d, "metadata", what),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, signal: AbortSignal | None = None) -> Self:
        d = _obj(data, "stream options")
        return cls(signal=signal, **cls._fields_from_json(d, "stream options"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleStreamOptions(StreamOptions):
    """`stream_simple` options: pi's StreamOptions plus a thinking level and token budgets."""

    reasoning: ThinkingLevel | None = None
    thinking_budgets: ThinkingBudgets | None = None

    def to_json(self) -> JsonDict:
        out = StreamOptions.to_json(self)
        _put(out, "reasoning", self.reasoning)
        if self.thinking_budgets is not None:
            out["thinkingBudgets"] = self.thinking_budgets.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, signal: AbortSignal | None = None) -> Self:
        what = "stream options"
        d = _obj(data, what)
        budgets = d.get("thinkingBudgets")
        return cls(
            signal=signal,
            reasoning=_opt_literal(d, "reasoning", what, ThinkingLevel),
            thinking_budgets=None if budgets is None else ThinkingBudgets.from_json(budgets),
            **cls._fields_from_json(d, what),
        )
