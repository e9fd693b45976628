"""Host-tool parking: a turn's wait for the host's tool results (agy kept running), the registry
of turns waiting so (`PARKED`), and what a turn says when the program stopped waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from agy_provider.bridge.host_tools import ParkedTurns
from agy_provider.contract.parked import ParkedTurn
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage

__all__ = ["NO_RESUME_OPTION", "PARKED", "STOPPED_WAITING", "HostToolParking", "end_parked"]

log = logging.getLogger(__name__)

STOPPED_WAITING = (
    "the program stopped waiting for its turns before the host answered agy's tool call"
)
# `options.metadata[NO_RESUME_OPTION]` true: this call's tool results must not resume a parked
# turn, whatever they answer (a host that cannot show the call is the parked turn's owner's).
NO_RESUME_OPTION = "agy_no_resume"
# A wait for the host ends this long before agy's own clock would end the turn.
_AGY_CLOCK_MARGIN = 10.0


# Turns waiting for the host to run the tools agy called (pi's tool-use loop): the host's next
# `stream_simple`, whose context ends in those calls' results, resumes its turn from here.
PARKED = ParkedTurns()


class HostToolParking:
    """One turn's waits for the host's tool results.

    `begin` starts a wait, `wait` holds it (the turn registered in `PARKED` by its call ids)
    until the host resumes the turn (`answered`, then `go_on`), another party ends it (`end`),
    agy's clock or `host_tool_timeout` runs out. `delivered` is the `toolUse` message the host
    holds while the turn waits: the history its next turn starts from if this one ends.
    """

    def __init__(self) -> None:
        # Resolves with "" when the host resumes, or with why the wait ended.
        self._resumed: asyncio.Future[str] | None = None
        self.delivered: AssistantMessage | None = None
        self.signal_swapped = asyncio.Event()  # a resumed turn watches the new call's signal

    @property
    def parked(self) -> bool:
        """True while the turn waits for the host's tool results."""
        return self._resumed is not None and not self._resumed.done()

    def begin(self) -> None:
        """A wait starts (before the `toolUse` message goes out)."""
        self._resumed = asyncio.get_running_loop().create_future()

    async def wait(
        self,
        turn: ParkedTurn,
        calls: Sequence[ToolCall],
        exit_task: asyncio.Future[int | None],
        *,
        delivered: AssistantMessage | None = None,
        host_tool_timeout: float,
        agy_deadline: float,
        print_timeout: float,
    ) -> tuple[str, float]:
        """Wait, agy kept running, until the host resumes `turn` or the wait ends.

        Returns why it ended ("" when the host resumed) and how long it took (the turn's
        deadlines do not count the host's time). `delivered`: the `toolUse` message the host
        now holds. `agy_deadline` is when agy's own clock (`--print-timeout`, `print_timeout`
        long) ends the turn, on the loop's clock.
        """
        resumed = self._resumed
        assert resumed is not None, "begin() starts a wait"
        self.delivered = delivered
        loop = asyncio.get_running_loop()
        PARKED.park((call.id for call in calls), turn)
        names = ", ".join(sorted({call.name for call in calls}))
        log.info("agy called host tool(s) %s; waiting for the host's results", names)
        parked_at = loop.time()
        # agy's own clock (--print-timeout) runs on while the host works: the wait ends before it.
        agy_left = agy_deadline - parked_at - _AGY_CLOCK_MARGIN
        wait = min(host_tool_timeout, max(0.0, agy_left))
        deadline = parked_at + wait
        if loop in PARKED.stopping:
            resumed.set_result(STOPPED_WAITING)
        waits: set[asyncio.Future[Any]] = {resumed, exit_task}
        try:
            await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if exit_task.done() and not resumed.done():
                # agy stopped waiting (it gave up on the call, or failed): what it did after
                # is the host's still, so the turn waits for the host's next call all the same.
                log.warning(
                    "agy exited while waiting for the host's results of %s; what it wrote goes "
                    "to the host's next call",
                    names,
                )
                await asyncio.wait({resumed}, timeout=max(0.0, deadline - loop.time()))
        finally:
            PARKED.release(turn)
        waited = loop.time() - parked_at
        if resumed.done():
            why = resumed.result()
            if not why:
                return "", waited  # resumed: the pump goes on (and reads how agy ended, if it did)
        elif wait < host_tool_timeout:
            resumed.cancel()
            why = (
                f"the host did not answer agy's call to {names} before agy's own clock for the "
                f"turn (--print-timeout {print_timeout:g}s, from turn_timeout and "
                "host_tool_timeout) ran out; raise turn_timeout or host_tool_timeout"
            )
        else:
            resumed.cancel()
            why = (
                f"the host did not answer agy's call to {names} within "
                f"{host_tool_timeout:g}s (host_tool_timeout, AGY_HOST_TOOL_TIMEOUT); "
                "run the tool calls of a `toolUse` message and call stream_simple again with "
                "their results"
            )
        # The host's stream has ended (`toolUse`), so the log is where this can be said (a
        # program that stopped waiting for its turns knows, and is told more quietly).
        log.log(
            logging.INFO if why == STOPPED_WAITING else logging.WARNING,
            "the turn waiting for host tools ends: %s",
            why,
        )
        return why, waited

    def answered(self, turn: ParkedTurn, results: Mapping[str, ToolResultMessage]) -> None:
        """The host brought `results` for `turn`'s calls: it waits no longer."""
        PARKED.release(turn)
        PARKED.answered(results, turn)
        self.delivered = None

    def go_on(self) -> None:
        """End the wait as resumed (after the host's new stream got its `start`)."""
        assert self._resumed is not None
        self._resumed.set_result("")
        self.signal_swapped.set()

    def end(self, why: str) -> None:
        """End the wait, if the turn waits, for `why`."""
        if self.parked and self._resumed is not None:
            self._resumed.set_result(why)


async def end_parked(turns: Iterable[ParkedTurn], *, but: ParkedTurn, why: str) -> None:
    """End each of the parked `turns` but `but` (the turn asking) for `why`, each settled."""
    for parked in turns:
        if parked is not but:
            await parked.end_parked(why)
