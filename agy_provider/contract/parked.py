"""`ParkedTurn`: the handle of a turn waiting for the host's tool results, as the registry of
parked turns (`bridge/host_tools.ParkedTurns`) and the hosts that resume one see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol

if TYPE_CHECKING:
    import asyncio

    from agy_provider.pi.options import SimpleStreamOptions
    from agy_provider.pi.stream import AssistantMessageEventStream
    from agy_provider.pi.types import Context
    from agy_provider.pi.types import ToolResultMessage

__all__ = ["ParkedTurn"]


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

    def resume(
        self,
        context: Context,
        options: SimpleStreamOptions,
        stream: AssistantMessageEventStream,
        results: dict[str, ToolResultMessage],
    ) -> bool:
        """Go on into `stream` with the host's `results` (by call id); False when the turn no
        longer waits (the host then starts a new turn with them). On the turn's loop."""
        ...

    async def end_parked(self, why: str) -> None:
        """End the turn for `why` (it will not be resumed), from any loop, once it settled."""
