"""The contract every event source keeps: the typed `EventSource` protocol the turn driver relies
on, the factory a plugin registers and the `register` callback it is given.

Sources only read agy and hand back Step snapshots; they never emit pi events themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Protocol
from typing import runtime_checkable

if TYPE_CHECKING:
    from agy_provider.agy.step import Step
    from agy_provider.contract.turn import TurnContext

__all__ = ["EventSource", "EventSourceFactory", "RegisterEventSource"]


@runtime_checkable
class EventSource(Protocol):
    """One turn's reader of agy (registered by a plugin with `register_event_sources`).

    Every coroutine here may be cancelled at any moment (an abort) and must leave the source
    closable; none may block the event loop (I/O runs in a worker thread or is incremental).
    """

    name: str
    #: Decision hooks running now: a person may be thinking, so the idle deadline does not count.
    deciding: int

    async def open(self) -> None:
        """Connect to agy (database, server); raise an `AgyError` when that is impossible."""

    async def poll(self, *, force: bool = False) -> list[Step]:
        """The newest snapshot of every step that changed since the last call ([] when none).

        `force` re-reads even when the source believes nothing moved. A failure of the source
        raises `SourceError` (the turn may then finish from another source).
        """
        ...

    async def wait(self, timeout: float) -> None:
        """Return when something may have changed, or after at most `timeout` seconds."""

    async def cancel(self) -> None:
        """Ask agy to stop the turn's work, as far as this source can (the runner kills agy)."""

    def last_final_index(self, after: int = -1) -> int:
        """The highest index below which every step seen past `after` is final (what a session
        may record); unfinished steps at or before `after` (earlier turns') are ignored."""
        ...

    async def aclose(self) -> None:
        """Release everything the source holds; safe to call twice, and after a failed open."""


# What a plugin registers to make a turn's event source: given the turn, it returns the source.
EventSourceFactory = Callable[["TurnContext"], EventSource]


class RegisterEventSource(Protocol):
    """`register(name, factory)`: `factory(turn)` makes the turn's event source; `database` says
    it reads agy's database (the fallback), `language_server` that it needs agy's server,
    `stdout` that it reads agy's stream-json stdout (it needs neither)."""

    def __call__(
        self,
        name: str,
        factory: EventSourceFactory,
        *,
        database: bool = False,
        language_server: bool = False,
        stdout: bool = False,
    ) -> None: ...
