"""`ParkedToolCalls`: agy's host-tool calls held open until the host answers them in its next
`stream_simple` (park and resume).
"""

from __future__ import annotations

import asyncio

from agy_provider.contract.host_tools import HostToolCall
from agy_provider.contract.host_tools import HostToolResult
from agy_provider.contract.host_tools import as_result

__all__ = ["ParkedToolCalls"]


class ParkedToolCalls:
    """Holds agy's host-tool calls open until the host answers them (park and resume).

    Give `handle` to a `HostToolBridge` as its handler. `await next_call()` returns each call as
    agy makes it (the turn ends its `stream_simple` with that `toolCall`); `resolve(call.id,
    result)` answers it later (from the host's `ToolResultMessage`), and agy's request completes.
    A call agy abandoned, or that the bridge's closing answered, cannot be resolved any more:
    `resolve` then returns False.
    """

    def __init__(self) -> None:
        self._open: dict[str, tuple[HostToolCall, asyncio.Future[HostToolResult]]] = {}
        self._new: asyncio.Queue[HostToolCall] = asyncio.Queue()

    async def handle(self, call: HostToolCall) -> HostToolResult:
        """The bridge's handler: park `call` and wait for its answer."""
        answer: asyncio.Future[HostToolResult] = asyncio.get_running_loop().create_future()
        self._open[call.id] = (call, answer)
        self._new.put_nowait(call)
        try:
            return await answer
        finally:
            self._open.pop(call.id, None)

    async def next_call(self) -> HostToolCall:
        """The next call agy made that no one has taken yet (skipping calls already ended)."""
        while True:
            call = await self._new.get()
            if call.id in self._open:
                return call

    @property
    def pending(self) -> tuple[HostToolCall, ...]:
        """Calls parked and not answered yet, oldest first."""
        return tuple(call for call, _ in self._open.values())

    def resolve(self, call_id: str, result: HostToolResult | str) -> bool:
        """Answer the parked call `call_id`; False when it is no longer open."""
        entry = self._open.get(call_id)
        if entry is None or entry[1].done():
            return False
        entry[1].set_result(as_result(result, entry[0].name))
        return True
