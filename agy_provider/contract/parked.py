"""`ParkedTurn`: the handle of a turn waiting for the host's tool results, as the registry of
parked turns (`bridge/host_tools.ParkedTurns`) and the hosts that resume one see it; `HostCall`,
the call that resumes it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from typing import Protocol

if TYPE_CHECKING:
    import asyncio

    from agy_provider.pi.options import SimpleStreamOptions
    from agy_provider.pi.stream import AssistantMessageEventStream
    from agy_provider.pi.types import Context
    from agy_provider.pi.types import ToolResultMessage

__all__ = ["HostCall", "ParkedTurn"]


@dataclasses.dataclass(frozen=True, slots=True)
class HostCall:
    """One host call's part of a turn: its context, options and the stream its events go to.

    A turn resumed by the host's tool results continues under the new call's value (its
    context, abort signal and stream); the turn's model and `TurnOptions` stay its own.
    """

    context: Context
    options: SimpleStreamOptions
    stream: AssistantMessageEventStream


class ParkedTurn(Protocol):
    """A turn that handed the host agy's tool calls and waits for their results
    (`live/turn.TurnDriver`). Only its owner (the same `session_id`) resumes it."""

    @property
    def session_id(self) -> str:
        """The host's session the turn belongs to ("" for none)."""
        ...

    @property
    def conversation_id(self) -> str:
        """The agy conversation the turn runs on ("" before that is known)."""
        ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the turn runs on (resume it only from there)."""
        ...

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The task running the turn (a resumed stream follows it)."""
        ...

    def resume(self, call: HostCall, results: dict[str, ToolResultMessage]) -> bool:
        """Go on into `call`'s stream with the host's `results` (by call id); False when the turn
        no longer waits (the host then starts a new turn with them). On the turn's loop."""
        ...

    async def end_parked(self, why: str) -> None:
        """End the turn for `why` (it will not be resumed), from any loop, once it settled."""
