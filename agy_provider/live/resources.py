"""What a live turn opened — agy's process (and its spawn), the host tools' bridge, the staged
images, the event sources, agy's version task, the conversation lock — and closing all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agy_provider.live.images import ImageStaging
from agy_provider.live.images import newest_images
from agy_provider.live.prompt import build_prompt
from agy_provider.live.warm.turn import WarmTurn
from agy_provider.workers import off_loop

__all__ = ["ABORT_GRACE", "TurnResources"]

if TYPE_CHECKING:
    from agy_provider.bridge.host_tools import TurnTools
    from agy_provider.contract.turn import TurnProcess
    from agy_provider.live.conversation_lock import ConversationLock
    from agy_provider.live.handover import SourceHandover
    from agy_provider.live.turn_edges import TurnPlan
    from agy_provider.pi.types import Context
    from agy_provider.pi.types import Message

# After an abort, how long agy may take to stop on SIGTERM before SIGKILL: a bound, rarely
# reached (the `aborted` event typically follows the signal within tens of ms).
ABORT_GRACE = 0.1


class TurnResources:
    """Everything a turn opens, each set as it opens (an abort may come at any moment)."""

    def __init__(self) -> None:
        self.process: TurnProcess | None = None
        self.starting: asyncio.Task[None] | None = None  # agy's spawn while it runs
        self.tools: TurnTools | None = None  # host tools offered to agy (the MCP bridge)
        self.images: ImageStaging | None = None  # the newest message's images, as agy's files
        self.handover: SourceHandover | None = None  # the turn's event sources
        self.version_task: asyncio.Task[str] | None = None  # agy's version, asked beside the turn
        self.lock: ConversationLock | None = None  # keeps a conversation's turns one at a time

    @property
    def admission_wait(self) -> float:
        """How long the turn waited in line for agy's cold start (`live/admission`)."""
        return 0.0 if self.process is None else self.process.admission.waited

    async def offer_tools(self, tools: TurnTools, plan: TurnPlan) -> TurnPlan:
        """Start the MCP bridge serving `tools`; `plan` with agy's request reading its config.
        A warm turn's agy serves them from a bridge of its own (`spawned`): the request
        then names them (`mcp_tools`), since they are part of what that agy is."""
        from agy_provider.bridge.host_tools import tools_signature

        self.tools = tools
        request = plan.request
        if request.warm:
            offered = await tools.prepare()
            request = dataclasses.replace(request, mcp_tools=tools_signature(offered))
            return dataclasses.replace(plan, request=request)
        await tools.start()
        extra_dirs = (*request.extra_dirs, tools.config_dir)
        return dataclasses.replace(
            plan, request=dataclasses.replace(request, extra_dirs=extra_dirs)
        )

    def hold(self, lock: ConversationLock | None) -> None:
        """The turn holds `lock`, its conversation's (None: planning could not take it now)."""
        self.lock = lock

    def spawned(self, process: TurnProcess) -> TurnProcess:
        """agy's process for the turn, not started yet; a warm turn's relays agy's calls to the
        turn's tools (`offer_tools`). Returns `process`."""
        self.process = process
        if self.tools is not None and isinstance(process, WarmTurn):
            process.tools = self.tools
        return process

    async def start_agy(self) -> None:
        """Start the process `spawned` gave; an abort meanwhile leaves the start to `stop_agy`."""
        assert self.process is not None
        self.starting = asyncio.ensure_future(self.process.start())
        await asyncio.shield(self.starting)
        self.starting = None

    def ask_version(self, version: Awaitable[str]) -> None:
        """Learn agy's version beside the turn (for the session record; `version_task`)."""
        self.version_task = asyncio.ensure_future(version)

    def read_from(self, handover: SourceHandover) -> SourceHandover:
        """The turn's event sources from now on (closed with the rest); returns `handover`."""
        self.handover = handover
        return handover

    async def stage_images(
        self, context: Context, plan: TurnPlan, *, unseen: Sequence[Message]
    ) -> TurnPlan:
        """The newest message's images as files of a private folder agy may read (one more
        --add-dir), viewed by path: `plan` with the prompt naming them."""
        self.images = ImageStaging(newest_images(context))
        await self.images.open()
        prompt = await off_loop(
            build_prompt, context, resume=plan.resume, unseen=unseen, image_paths=self.images.paths
        )
        request = plan.request
        # A warm agy's folders were fixed when it started: a turn with images runs its own agy.
        request = dataclasses.replace(
            request,
            prompt=prompt,
            extra_dirs=(*request.extra_dirs, self.images.folder),
            warm=False,
        )
        return dataclasses.replace(plan, prompt=prompt, request=request)

    async def stop_agy(self, grace: float = 2.0) -> None:
        starting = self.starting
        if starting is not None and self.process is not None and self.process.admission.queued:
            starting.cancel()  # in line for a cold start (`live/admission`): nothing to end
        if starting is not None:
            # A spawn interrupted by the abort still produces a process: let it finish (it is a
            # fork and exec), then end it; one that cannot finish in time is cancelled, and the
            # runner kills whatever process it still makes.
            await asyncio.wait({starting}, timeout=grace)
            if not starting.done():
                starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
        if self.process is not None:
            await self.process.terminate(grace=grace)

    async def close(self) -> None:
        """End what the turn started: host tools, agy's process tree, the sources, the images.

        Each step runs to its end even if the turn is cancelled meanwhile: `asyncio.run`
        returning right after `done` cancels every task once, and a host that runs each turn in
        an `asyncio.run` of its own must not leak a database connection and an inotify
        descriptor per turn. A step cut short runs once more; the cancellation is raised after.
        """
        if self.version_task is not None and not self.version_task.done():
            self.version_task.cancel()
        cancelled = False
        for step in (
            self._close_tools,
            self._end_process,
            self._close_sources,
            self._remove_images,
        ):
            try:
                await step()
            except asyncio.CancelledError:
                cancelled = True
                await step()
        self.release_lock()  # agy is gone: the conversation's next turn may start
        if cancelled:
            raise asyncio.CancelledError

    async def _remove_images(self) -> None:
        if self.images is not None:
            await self.images.aclose()

    async def _close_tools(self) -> None:
        if self.tools is not None:
            # First, while agy can still read them: calls still open are answered with an error.
            await self.tools.aclose()

    async def _end_process(self) -> None:
        if self.process is not None:
            # Also after agy exited on its own: what it left running in its group goes too.
            await self.process.terminate(
                grace=ABORT_GRACE if self.process.returncode is not None else 2.0
            )

    async def _close_sources(self) -> None:
        if self.handover is not None:
            await self.handover.aclose()

    def release_lock(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    async def undo(self) -> None:
        """Undo a launch (agy, its tools, images, the lock) so the turn can launch anew."""
        await self.stop_agy(grace=ABORT_GRACE)
        await self._close_tools()
        self.tools = None
        await self._remove_images()
        self.images = None
        if self.version_task is not None and not self.version_task.done():
            self.version_task.cancel()
        self.version_task = None
        self.process = None
        self.release_lock()

