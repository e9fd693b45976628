"""The rpc event source: agy's language server over Connect — pushes, reconcile, interactions, cancel.

Streams `StreamAgentStateUpdates`, reconciles with a `GetCascadeTrajectorySteps` snapshot on every
(re)connect, falls back to polling after stream errors, and answers WAITING steps through the hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from agy_provider.agy.rpcjson import CheckedTexts
from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import InteractionKind
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepStatus
from agy_provider.errors import DecodeError
from agy_provider.errors import RpcError
from agy_provider.errors import SourceError
from agy_provider.hookspecs import hookimpl
from agy_provider.live.fswatch import watch_folder
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.wire.connect import SkippedFrame
from agy_provider.workers import off_loop

if TYPE_CHECKING:  # httpx and its dependencies: imported by the first rpc turn, off the loop
    from agy_provider.contract.sources import RegisterEventSource
    from agy_provider.contract.turn import TurnContext
    from agy_provider.contract.turn import TurnProcess
    from agy_provider.rpc.client import ConnectClient

__all__ = ["RpcEventSource", "register_event_sources"]

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.25  # polling after stream errors, while the turn is active (AGY-FORMATS §4.4)
REOPEN_DELAY = 0.05  # between a clean end of the stream and reopening it
# After a clean end, how long agy may take to exit before we reconcile: in print mode agy exits
# right after its turn settles, taking its server along, and the database has the last word. On
# a busy machine (20 turns on 2 cores) its exit takes most of a second.
EXIT_AFTER_END = 1.0
EXIT_CHECK_FIRST = 0.02  # then doubling, up to EXIT_CHECK_MAX
EXIT_CHECK_MAX = 0.2
INTERACTION_ATTEMPTS = 3  # answers tried against re-asked steps before giving up
SERVER_TIMEOUT = 30.0  # for the language server to answer after agy started
# A stream's first frame replays every earlier step (AGY-FORMATS §4.4): for a resumed
# conversation of thousands of rows that is megabytes of JSON, nearly all of it before our last
# index. Above this size it is not parsed; a snapshot from our index on replaces it.
REPLAY_PARSE_LIMIT = 64 * 1024
_INT32_MAX = 2**31 - 1  # the page's end: Slice's bounds are int32
# Under `auto` another source can take over, so waiting for a server that may not exist is short.
SERVER_TIMEOUT_AUTO = 5.0

# How to refuse interaction kinds we do not support, so agy never waits on them.
_REFUSALS: Mapping[str, dict[str, Any]] = {
    "filePermission": {"filePermission": {"allow": False}},
    "runCommand": {"runCommand": {"confirm": False}},
}


@hookimpl
def register_event_sources(register: RegisterEventSource) -> None:
    register("rpc", RpcEventSource.for_turn, language_server=True)


def _load_client() -> Any:
    """The language-server module, imported with httpx and warmed up (~150 ms of CPU the first
    time in a process): only turns that use the rpc source pay it, in a worker thread, while
    the database already streams."""
    from agy_provider.rpc import language_server
    from agy_provider.rpc.client import warm_up

    warm_up()
    return language_server


async def _off_loop(call: Callable[..., Any], **kwargs: Any) -> Any:
    """Run a decision hook in a daemon thread: a person may take their time, and a hook that
    never returns (input() after Ctrl-C) must not keep the process from exiting, as the default
    executor's joined threads would."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any = None, error: BaseException | None = None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def run() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (call(**kwargs), None)
        except BaseException as exc:  # handed to the awaiting task, which decides
            outcome = (None, exc)
        # The turn may be over and its loop closed by now: then nobody is waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="agy-provider-decision", daemon=True).start()
    return await future


class RpcEventSource:
    """One turn's view of agy through its language server.

    `poll()` returns the newest snapshot of every step that changed since the last call; `wait()`
    sleeps until something arrived. A failure of the server surfaces from `poll()` as a
    `SourceError`, so the provider can finish the turn from another source.
    """

    name = "rpc"

    def __init__(self, turn: TurnContext) -> None:
        if turn.binding is None:  # the core makes sources once agy's database is bound
            raise SourceError("the rpc event source needs the turn's conversation, not bound yet")
        self.turn = turn
        self.conversation_id: str = turn.binding.conversation_id
        self.database = Path(turn.binding.path)
        self.min_index: int = turn.min_index
        self.client: ConnectClient | None = None
        self._latest: dict[int, Step] = {}
        self._seen: dict[int, Step] = {}
        # Streamed steps still growing: their texts as last checked, so a frame that carries a
        # longer answer costs what grew past JSON parsing (the frame itself still comes whole).
        self._texts: dict[int, CheckedTexts] = {}
        self._arrived = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: SourceError | None = None
        self._handled: set[tuple[int, str]] = set()
        self.deciding = 0  # decision hooks running now (a person may be thinking)
        self._streaming = asyncio.Event()  # the stream's first frame came, or the stream ended

    @classmethod
    def for_turn(cls, turn: TurnContext) -> RpcEventSource:
        return cls(turn)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        process = self._process()
        language_server = await off_loop(_load_client)
        self.client = await language_server.connect_to_language_server(
            process.scan_tree,
            csrf_token=process.request.csrf_token,
            log_file=process.request.log_file,
            exited=lambda: process.returncode is not None,
            timeout=min(
                SERVER_TIMEOUT_AUTO if self.turn.event_source == "auto" else SERVER_TIMEOUT,
                self.turn.config.idle_timeout,
            ),
        )
        # agy loading a resumed conversation: its server knows it once agy writes it, so the
        # check asks again whenever the conversation's database moves (the sqlite source's watch).
        database = self.database
        watch = await watch_folder(database.parent, lambda name: name.startswith(database.stem))
        try:
            await language_server.prove_ownership(
                self.client,
                self.conversation_id,
                exited=lambda: process.returncode is not None,
                moved=watch.wait if watch is not None else None,
            )
        finally:
            if watch is not None:
                watch.close()
        self.turn.report_endpoint(self.client.base_url)
        await self._reconcile()
        self._spawn(self._run())
        # Up once the stream answers: its first frame can take the server a while (it replays
        # every earlier step), and until then the database, which streams already, serves.
        await self._streaming.wait()

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        try:
            # Their cancellations and failures are results here; a cancellation of the caller
            # (the host's abort while we close) still propagates.
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            client, self.client = self.client, None
            if client is not None:
                await client.aclose()

    def _process(self) -> TurnProcess:
        process = self.turn.process
        if process is None:  # the core makes sources once agy runs
            raise SourceError("the rpc event source needs agy running, and it is not")
        return process

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what the provider calls -------------------------------------------------------------

    async def poll(self, *, force: bool = False) -> list[Step]:
        if self._failure is not None and not self._latest:
            raise self._failure
        changed = [self._latest[i] for i in sorted(self._latest)]
        self._latest.clear()
        return changed

    async def wait(self, timeout: float) -> None:
        if self._latest or self._failure is not None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: no task per wait
                await self._arrived.wait()
        self._arrived.clear()

    def last_final_index(self, after: int = -1) -> int:
        highest = max(self._seen, default=self.min_index)
        open_steps = [i - 1 for i, s in self._seen.items() if not s.final and i > after]
        return min([highest, *open_steps])

    async def cancel(self) -> None:
        """Stop agy's running work and refuse whatever it waits on (cancel leaves WAITING alone)."""
        if self.client is None:
            return
        with contextlib.suppress(RpcError):
            await self.client.call("CancelCascadeSteps", {"cascadeId": self.conversation_id})
        for step in [s for s in self._seen.values() if s.status is StepStatus.WAITING]:
            with contextlib.suppress(RpcError):
                await self._send(step, self._refusal(step))

    # -- reading -----------------------------------------------------------------------------

    def _put(self, step: Step) -> None:
        if step.index <= self.min_index:
            return
        previous = self._seen.get(step.index)
        if previous == step:
            return
        self._seen[step.index] = step
        self._latest[step.index] = step
        self._arrived.set()
        if step.status is StepStatus.WAITING and step.interaction is not None:
            key = (step.index, step.interaction.kind.value)
            if key not in self._handled:
                self._handled.add(key)
                self._spawn(self._answer(step))

    async def _snapshot(self) -> list[Step]:
        assert self.client is not None
        offset = max(self.min_index + 1, 0)
        answer = await self.client.call(
            "GetCascadeTrajectorySteps", {"cascadeId": self.conversation_id, "stepOffset": offset}
        )
        listed = answer.get("steps") or []
        if not isinstance(listed, list):  # a source failure (the turn hands over), not a crash
            raise RpcError("internal", "GetCascadeTrajectorySteps answered steps that are no list")
        steps = []
        for position, raw in enumerate(listed):
            try:
                steps.append(decode_json_step(raw, position=offset + position))
            except DecodeError as exc:
                log.warning("step %d skipped: %s", offset + position, exc)
        return steps

    async def _reconcile(self) -> list[Step]:
        steps = await self._snapshot()
        for step in steps:
            self._put(step)
        return steps

    def _take_update(self, message: Mapping[str, Any]) -> None:
        update = message.get("update") or {}
        trajectory = update.get("mainTrajectoryUpdate") if isinstance(update, Mapping) else None
        steps_update = trajectory.get("stepsUpdate") if isinstance(trajectory, Mapping) else None
        steps: Sequence[Any] = (
            steps_update.get("steps") or [] if isinstance(steps_update, Mapping) else []
        )
        indices: Sequence[Any] = (
            steps_update.get("indices") or [] if isinstance(steps_update, Mapping) else []
        )
        if not isinstance(steps, list) or not isinstance(indices, list):
            log.warning("an update frame of an unexpected shape was skipped")
            return
        for position, raw in enumerate(steps):
            try:
                index = int(indices[position]) if position < len(indices) else None
            except (TypeError, ValueError):
                index = None  # the step names its own index too
            if index is not None and index <= self.min_index:
                continue  # a resumed conversation's earlier steps, replayed by the first frame
            texts = None if index is None else self._texts.setdefault(index, CheckedTexts())
            try:
                step = decode_json_step(raw, index=index, texts=texts)
                if index is not None and step.final:
                    del self._texts[index]  # it cannot grow any more
                self._put(step)
            except (DecodeError, ValueError, TypeError) as exc:
                log.warning("a streamed step was skipped: %s", exc)

    async def _run(self) -> None:
        try:
            await self._stream_or_poll()
        finally:
            self._streaming.set()  # however it ended, `open()` waits no longer

    async def _stream_or_poll(self) -> None:
        """Stream; on a clean end or a stall reconcile and reopen; after errors, poll."""
        assert self.client is not None
        while True:
            try:
                updates = self.client.stream(
                    "StreamAgentStateUpdates",
                    self._stream_request(),
                    skip_first_over=REPLAY_PARSE_LIMIT,
                )
                # Closed here, however the loop ends (a snapshot failing mid-stream too), so the
                # response is released now rather than when the generator is collected.
                async with contextlib.aclosing(updates):
                    async for message in updates:
                        if isinstance(message, SkippedFrame):
                            # The replay of a long conversation, unread: a snapshot of the steps
                            # after our last index, taken now, holds all of it that we need,
                            # and the frames that follow carry every later change.
                            await self._reconcile()
                        else:
                            self._take_update(message)
                        self._streaming.set()
                self._streaming.set()
                # A clean end: the turn settled; the snapshot is the truth. Then reopen. Unless
                # agy exits: its server goes with it, so a snapshot could only fail (a refused
                # connection costs the loop more than an answer), and the database has the last
                # word anyway.
                if await self._agy_exits_within(EXIT_AFTER_END):
                    return
                if not await self._reconcile_or_fail():
                    return
                await asyncio.sleep(REOPEN_DELAY)
            except RpcError as exc:
                self._streaming.set()  # reconciling and polling serve from here on
                if exc.code == "deadline_exceeded":
                    # No frame for a while: normal while agy thinks or idles. Check and reopen.
                    if not await self._reconcile_or_fail():
                        return
                    continue
                log.info("agy's update stream failed (%s); polling every %.2fs", exc, POLL_INTERVAL)
                await self._poll_forever()
                return

    def _stream_request(self) -> dict[str, Any]:
        request: dict[str, Any] = {"conversationId": self.conversation_id}
        if self.min_index >= 0 and self.turn.config.paged_replay:
            # The first frame then replays only the steps after ours, not the whole history.
            request["initialStepsPageBounds"] = {
                "startIndex": self.min_index + 1,
                "endIndexExclusive": _INT32_MAX,
            }
        return request

    async def _agy_exits_within(self, timeout: float) -> bool:
        """True once agy has exited, looking until `timeout` (a turn without a process: False)."""
        process = self.turn.process
        if process is None:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause = EXIT_CHECK_FIRST
        while process.returncode is None:
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, EXIT_CHECK_MAX)
        return True

    async def _reconcile_or_fail(self) -> bool:
        try:
            await self._reconcile()
        except RpcError as exc:
            self._fail(exc)
            return False
        return True

    async def _poll_forever(self) -> None:
        while True:
            try:
                await self._reconcile()
            except RpcError as exc:
                self._fail(exc)
                return
            await asyncio.sleep(POLL_INTERVAL)

    def _fail(self, exc: RpcError) -> None:
        self._failure = SourceError(f"agy's language server stopped answering: {exc.message}")
        self._arrived.set()

    # -- interactions ------------------------------------------------------------------------

    async def _answer(self, step: Step) -> None:
        """Answer a WAITING step through the hooks, against the step as it is right now."""
        assert step.interaction is not None
        kind = step.interaction.kind
        for _attempt in range(INTERACTION_ATTEMPTS):
            try:
                current = await self._snapshot()
            except RpcError as exc:
                log.warning("could not re-read steps before answering: %s", exc)
                return
            waiting = [
                s
                for s in current
                if s.status is StepStatus.WAITING
                and s.interaction is not None
                and s.interaction.kind is kind
                and s.index >= step.index
            ]
            if not waiting:
                return  # answered, canceled or timed out without a re-ask
            target = waiting[-1]
            self._handled.add((target.index, kind.value))
            body = await self._decide(target)
            try:
                await self._send(target, body)
                return
            except RpcError as exc:
                if "not registered" not in exc.message:
                    log.warning("answering step %d failed: %s", target.index, exc)
                    return
                log.info("step %d was re-asked; answering again", target.index)
        log.warning("gave up answering step %d after %d attempts", step.index, INTERACTION_ATTEMPTS)

    async def _decide(self, step: Step) -> dict[str, Any]:
        self.deciding += 1
        try:
            return await self._ask_hooks(step)
        finally:
            self.deciding -= 1

    async def _ask_hooks(self, step: Step) -> dict[str, Any]:
        interaction = step.interaction
        assert interaction is not None
        hook = get_plugin_manager().hook
        if interaction.kind is InteractionKind.PERMISSION:
            allow = await _off_loop(
                hook.decide_permission, request=interaction.permission, step=step, turn=self.turn
            )
            return {"permission": {"allow": bool(allow)}}
        if interaction.kind is InteractionKind.QUESTION:
            answers = await _off_loop(
                hook.answer_question,
                questions=list(interaction.questions),
                step=step,
                turn=self.turn,
            )
            return {"askQuestion": {"responses": [dict(a) for a in answers or []]}}
        log.warning(
            "step %d asks for %r, which we do not support: refusing", step.index, interaction.name
        )
        return self._refusal(step)

    @staticmethod
    def _refusal(step: Step) -> dict[str, Any]:
        interaction = step.interaction
        if interaction is not None and interaction.kind is InteractionKind.QUESTION:
            responses = [
                {"question": q.question, "selectedOptionIds": []} for q in interaction.questions
            ]
            return {"askQuestion": {"responses": responses}}
        name = interaction.name if interaction is not None else ""
        return dict(_REFUSALS.get(name, {"permission": {"allow": False}}))

    async def _send(self, step: Step, body: Mapping[str, Any]) -> None:
        assert self.client is not None
        await self.client.call(
            "HandleCascadeUserInteraction",
            {
                "cascadeId": self.conversation_id,
                "interaction": {
                    "trajectoryId": step.trajectory_id,
                    "stepIndex": step.index,
                    **body,
                },
            },
        )
