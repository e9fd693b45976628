"""AssistantMessageEventStream: the queue a provider pushes pi events into and a host reads.

Owns pi's EventStream semantics: events wait until consumed, iteration stops after done or error,
and `result()` resolves whether or not anyone iterates.

The producer calls `push(event)` and `end()` on the event loop's thread (or `push_threadsafe` /
`end_threadsafe` from any other thread); consumers `async for event in stream` and
`await stream.result()`. As in pi, the first `done` or `error` event (or `end(result)`) settles
the result, and anything pushed after the stream is done is dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from agy_provider.errors import IncompleteStreamError
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage

__all__ = ["AssistantMessageEventStream", "TurnFacts"]


@dataclasses.dataclass(frozen=True, slots=True)
class TurnFacts:
    """What the turn behind a stream knew when its message ended: agy-provider's, beside pi's.

    `conversation_id` the agy conversation ("" when none was bound); `exit_code` agy's, once it
    had exited; `model` the model that answered, as agy recorded it; `source` the event source
    the turn read (`rpc`, `sqlite`, …); `admission_wait` the seconds the turn waited in line for
    a cold start of agy (`cold_starts`; 0.0 when it waited for none); `source_fallbacks` how
    often the turn fell back from the source it read (one that could not start or failed) to
    agy's database or stdout.
    """

    conversation_id: str = ""
    exit_code: int | None = None
    model: str = ""
    source: str = ""
    admission_wait: float = 0.0
    source_fallbacks: int = 0


class AssistantMessageEventStream:
    """pi's AssistantMessageEventStream: async-iterable events plus `await result()`.

    `loop` is only needed for the thread-safe methods; it defaults to the loop running when the
    stream is made, or else the first loop a consumer awaits on.
    """

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self._loop = loop
        self._queue: deque[AssistantMessageEvent] = deque()
        self._done = False
        self._result: AssistantMessage | None = None
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()
        self._turn: asyncio.Future[Any] | None = None  # the turn feeding this stream
        # Set by the turn just before its final event (or its `toolUse` message) is pushed.
        self.facts = TurnFacts()

    def follow_turn(self, turn: asyncio.Future[Any]) -> None:
        """Tie the stream to the turn that feeds it (a task): `turn_done` and `turn_ended()`
        then follow the turn, which outlives a stream that ended `toolUse` while agy waits for
        the host's tool results — the host's abort signal must still reach it."""
        self._turn = turn

    @property
    def turn_done(self) -> bool:
        """True once the turn behind the stream has ended (the stream's end if none is tied)."""
        return self._done if self._turn is None else self._turn.done()

    async def turn_ended(self) -> None:
        """Wait until the turn behind the stream has ended (the stream's end if none is tied)."""
        if self._turn is None:
            self._bind()
            await self._finished.wait()
        else:
            await asyncio.wait({self._turn})

    @property
    def done(self) -> bool:
        """True once a `done` or `error` event was pushed or `end()` was called."""
        return self._done

    def push(self, event: AssistantMessageEvent) -> None:
        """Queue `event` for consumers. Ignored once the stream is done."""
        if self._done:
            return
        if isinstance(event, DoneEvent):
            self._settle(event.message)
        elif isinstance(event, ErrorEvent):
            self._settle(event.error)
        self._queue.append(event)
        self._changed.set()

    def end(self, result: AssistantMessage | None = None) -> None:
        """Close the stream; `result` settles `result()` unless a done/error event already did."""
        if result is not None and self._result is None:
            self._result = result
        self._done = True
        self._finished.set()
        self._changed.set()

    def push_threadsafe(self, event: AssistantMessageEvent) -> None:
        """`push` from a thread other than the event loop's."""
        self._bound_loop().call_soon_threadsafe(self.push, event)

    def end_threadsafe(self, result: AssistantMessage | None = None) -> None:
        """`end` from a thread other than the event loop's."""
        self._bound_loop().call_soon_threadsafe(self.end, result)

    def __aiter__(self) -> AsyncIterator[AssistantMessageEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AssistantMessageEvent]:
        self._bind()
        while True:
            if self._queue:
                yield self._queue.popleft()
            elif self._done:
                return
            else:
                self._changed.clear()
                await self._changed.wait()

    async def result(self) -> AssistantMessage:
        """The final message: the `done` event's `message` or the `error` event's `error`.

        Raises `IncompleteStreamError` if the stream ended without either and without a result.
        """
        self._bind()
        await self._finished.wait()
        if self._result is None:
            raise IncompleteStreamError("the stream ended without a done or error event")
        return self._result

    def _settle(self, message: AssistantMessage) -> None:
        self._done = True
        if self._result is None:
            self._result = message
        self._finished.set()

    def _bind(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    def _bound_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the stream is not bound to an event loop yet; pass loop=")
        return self._loop
