"""The options a turn takes: pi's StreamOptions and SimpleStreamOptions, thinking budgets.

Owns their camelCase JSON (as in `types`) and the `AbortSignal` that cancels a turn from any thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import Self
from typing import TypeAlias

from agy_provider.pi._pijson import OPT_DICT
from agy_provider.pi._pijson import OPT_INT
from agy_provider.pi._pijson import OPT_NUM
from agy_provider.pi._pijson import OPT_STR
from agy_provider.pi._pijson import JsonShape
from agy_provider.pi._pijson import PiJson
from agy_provider.pi._pijson import literal
from agy_provider.pi._pijson import nested

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
class ThinkingBudgets(PiJson):
    """Token budgets per thinking level, for providers that budget thinking in tokens."""

    minimal: int | None = None
    low: int | None = None
    medium: int | None = None
    high: int | None = None

    _json = JsonShape("thinking budgets", dict.fromkeys(("minimal", "low", "medium", "high"), OPT_INT))


# StreamOptions' JSON-valued fields; `signal` and pi's callbacks (onPayload, onResponse) are live
# objects and have no JSON form.
_STREAM_OPTIONS = {
    "temperature": OPT_NUM,
    "max_tokens": OPT_INT,
    "api_key": OPT_STR,
    "transport": literal(Transport).or_none(),
    "cache_retention": literal(CacheRetention).or_none(),
    "session_id": OPT_STR,
    "headers": OPT_DICT,
    "timeout_ms": OPT_INT,
    "max_retries": OPT_INT,
    "max_retry_delay_ms": OPT_INT,
    "metadata": OPT_DICT,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions(PiJson):
    """Options every pi provider accepts; `signal` aborts the turn. `api_key` stays out of repr.

    `to_json` leaves out `signal` (a live object); `from_json` takes it as a keyword.
    """

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

    _json = JsonShape("stream options", _STREAM_OPTIONS)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, signal: AbortSignal | None = None) -> Self:
        """Decode pi's JSON for the options; `signal` is the live abort signal to attach."""
        return cls(signal=signal, **cls._json.read(cls, data))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleStreamOptions(StreamOptions):
    """`stream_simple` options: pi's StreamOptions plus a thinking level and token budgets."""

    reasoning: ThinkingLevel | None = None
    thinking_budgets: ThinkingBudgets | None = None

    _json = JsonShape(
        "stream options",
        _STREAM_OPTIONS,
        reasoning=literal(ThinkingLevel).or_none(),
        thinking_budgets=nested(ThinkingBudgets).or_none(),
    )
