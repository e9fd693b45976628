"""AssistantMessageEventStream: pi's EventStream semantics for order, ending, results, threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any
from typing import TypeVar

import pytest

from agy_provider.errors import IncompleteStreamError
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def message(
    text: str = "", stop_reason: Any = "stop", error: str | None = None
) -> AssistantMessage:
    return AssistantMessage(
        content=[TextContent(text)] if text else [],
        api="agy",
        provider="antigravity",
        model="m",
        stop_reason=stop_reason,
        error_message=error,
        timestamp=0,
    )


def text_turn(text: str) -> list[AssistantMessageEvent]:
    final = message(text)
    return [
        StartEvent(partial=message()),
        TextStartEvent(content_index=0, partial=message()),
        TextDeltaEvent(content_index=0, delta=text, partial=final),
        TextEndEvent(content_index=0, content=text, partial=final),
        DoneEvent(reason="stop", message=final),
    ]


async def collect(stream: AssistantMessageEventStream) -> list[AssistantMessageEvent]:
    return [event async for event in stream]


def test_events_arrive_in_order_and_iteration_stops_after_done() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        consumer = asyncio.create_task(collect(stream))
        events = text_turn("hello")
        for event in events:
            stream.push(event)
            await asyncio.sleep(0)
        stream.end()
        assert await consumer == events
        assert await stream.result() == message("hello")

    run(main())


def test_iteration_ends_on_done_even_without_end() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        for event in text_turn("hi"):
            stream.push(event)
        assert stream.done
        assert [e.type for e in await collect(stream)] == [
            "start",
            "text_start",
            "text_delta",
            "text_end",
            "done",
        ]

    run(main())


def test_result_resolves_without_iterating() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        waiter = asyncio.create_task(stream.result())
        await asyncio.sleep(0)
        assert not waiter.done()
        for event in text_turn("only the result"):
            stream.push(event)
        stream.end()
        assert await waiter == message("only the result")

    run(main())


def test_iterating_after_end_yields_everything_queued() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        events = text_turn("late reader")
        for event in events:
            stream.push(event)
        stream.end()
        assert await collect(stream) == events
        # A second pass finds the queue drained and the stream done.
        assert await collect(stream) == []

    run(main())


def test_error_path_settles_result_with_the_error_message() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        failed = message(stop_reason="error", error="agy crashed mid-turn; run it again")
        stream.push(StartEvent(partial=message()))
        stream.push(ErrorEvent(reason="error", error=failed))
        stream.end()
        events = await collect(stream)
        assert [e.type for e in events] == ["start", "error"]
        result = await stream.result()
        assert result.stop_reason == "error"
        assert result.error_message == "agy crashed mid-turn; run it again"

    run(main())


def test_pushes_after_done_are_dropped() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        first = message("first")
        stream.push(DoneEvent(reason="stop", message=first))
        stream.push(TextDeltaEvent(content_index=0, delta="late", partial=first))
        stream.push(DoneEvent(reason="length", message=message("second")))
        stream.end(message("from end"))
        assert [e.type for e in await collect(stream)] == ["done"]
        assert await stream.result() == first

    run(main())


def test_end_with_a_result_settles_it() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        stream.push(StartEvent(partial=message()))
        stream.end(message("handed to end"))
        assert [e.type for e in await collect(stream)] == ["start"]
        assert await stream.result() == message("handed to end")

    run(main())


def test_end_without_any_result_fails_result_instead_of_hanging() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        waiter = asyncio.create_task(stream.result())
        consumer = asyncio.create_task(collect(stream))
        await asyncio.sleep(0)
        stream.end()
        assert await consumer == []
        with pytest.raises(IncompleteStreamError):
            await waiter

    run(main())


def test_many_events_with_a_concurrent_producer() -> None:
    count = 10_000

    async def produce(stream: AssistantMessageEventStream) -> None:
        partial = message()
        stream.push(StartEvent(partial=partial))
        for i in range(count):
            stream.push(TextDeltaEvent(content_index=0, delta=str(i), partial=partial))
            if i % 97 == 0:
                await asyncio.sleep(0)
        stream.push(DoneEvent(reason="stop", message=message("end")))
        stream.end()

    async def main() -> None:
        stream = AssistantMessageEventStream()
        consumer = asyncio.create_task(collect(stream))
        await produce(stream)
        events = await consumer
        deltas = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
        assert deltas == [str(i) for i in range(count)]
        assert events[-1].type == "done"

    run(main())


def test_two_consumers_share_the_events_once_each() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        a = asyncio.create_task(collect(stream))
        b = asyncio.create_task(collect(stream))
        await asyncio.sleep(0)
        events = text_turn("shared")
        for event in events:
            stream.push(event)
            await asyncio.sleep(0)
        stream.end()
        got_a, got_b = await a, await b
        assert sorted(map(id, got_a + got_b)) == sorted(map(id, events))

    run(main())


def test_threadsafe_producer() -> None:
    async def main() -> None:
        stream = AssistantMessageEventStream()
        events = text_turn("from a thread")

        def produce() -> None:
            for event in events:
                stream.push_threadsafe(event)
            stream.end_threadsafe()

        thread = threading.Thread(target=produce)
        thread.start()
        assert await collect(stream) == events
        assert await stream.result() == message("from a thread")
        thread.join()

    run(main())


def test_stream_made_outside_a_loop_binds_when_consumed() -> None:
    stream = AssistantMessageEventStream()
    with pytest.raises(RuntimeError):
        stream.push_threadsafe(StartEvent(partial=message()))

    async def main() -> AssistantMessage:
        def produce() -> None:
            for event in text_turn("bound late"):
                stream.push_threadsafe(event)

        waiter = asyncio.create_task(stream.result())
        await asyncio.sleep(0)
        await asyncio.to_thread(produce)
        return await waiter

    assert run(main()) == message("bound late")
