"""Fakes of our own edges that several test files share (imported from here, never from a test
module): a parked turn for the parked-turn registry and the parking's tests."""

from __future__ import annotations

import asyncio
import dataclasses

from agy_provider.contract.parked import HostCall
from agy_provider.pi.types import ToolResultMessage


@dataclasses.dataclass(eq=False)  # a turn is itself, never equal to another one
class FakeParkedTurn:
    """A `contract/parked.ParkedTurn` that runs nowhere: it has an owner, is never resumed
    (`resume` says it no longer waits, as a turn that ended does), and records why it was ended."""

    session_id: str = ""
    conversation_id: str = ""
    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[None] | None = None
    ended: list[str] = dataclasses.field(default_factory=list)

    def resume(self, call: HostCall, results: dict[str, ToolResultMessage]) -> bool:
        return False

    async def end_parked(self, why: str) -> None:
        self.ended.append(why)
