"""pi types: exact JSON pinned against pi's types.ts, round trips, decode errors, AbortSignal."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agy_provider.errors import DecodeError
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingEndEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.events import ToolCallDeltaEvent
from agy_provider.pi.events import ToolCallEndEvent
from agy_provider.pi.events import ToolCallStartEvent
from agy_provider.pi.events import event_from_json
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.options import StreamOptions
from agy_provider.pi.options import ThinkingBudgets
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Cost
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import Model
from agy_provider.pi.types import ModelCost
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import Usage
from agy_provider.pi.types import UserMessage
from agy_provider.pi.types import content_from_json
from agy_provider.pi.types import message_from_json

# --- fixtures written by hand from pi's packages/ai/src/types.ts -------------------------------

USAGE_JSON: dict[str, Any] = {
    "input": 120,
    "output": 45,
    "cacheRead": 1000,
    "cacheWrite": 0,
    "totalTokens": 1165,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}
USAGE = Usage(120, 45, 1000, 0, 1165, Cost())

PARTIAL_JSON: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "Reading the file."},
        {"type": "text", "text": "Done."},
    ],
    "api": "agy",
    "provider": "antigravity",
    "model": "gemini-3-pro",
    "usage": USAGE_JSON,
    "stopReason": "stop",
    "timestamp": 1735689600000,
}
PARTIAL = AssistantMessage(
    content=[ThinkingContent("Reading the file."), TextContent("Done.")],
    api="agy",
    provider="antigravity",
    model="gemini-3-pro",
    usage=USAGE,
    stop_reason="stop",
    timestamp=1735689600000,
)
FAILED = AssistantMessage(
    content=[],
    api="agy",
    provider="antigravity",
    model="gemini-3-pro",
    stop_reason="error",
    error_message="agy exited with code 1: not logged in. Run `agy login` and try again.",
    timestamp=1735689600001,
)
CALL = ToolCall("call_1", "read", {"path": "a.txt"})


def roundtrip_through_text(value: Any) -> Any:
    """to_json -> JSON text -> from_json, so only real JSON survives."""
    return type(value).from_json(json.loads(json.dumps(value.to_json())))


# --- pinned JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TextContent("hi"), {"type": "text", "text": "hi"}),
        (
            TextContent("hi", text_signature="msg_1"),
            {"type": "text", "text": "hi", "textSignature": "msg_1"},
        ),
        (ThinkingContent("hmm"), {"type": "thinking", "thinking": "hmm"}),
        (
            ThinkingContent("", thinking_signature="opaque", redacted=True),
            {"type": "thinking", "thinking": "", "thinkingSignature": "opaque", "redacted": True},
        ),
        (
            ImageContent("iVBORw0KGgo=", "image/png"),
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        ),
        (
            ToolCall("call_1", "read", {"path": "a.txt"}, thought_signature="sig"),
            {
                "type": "toolCall",
                "id": "call_1",
                "name": "read",
                "arguments": {"path": "a.txt"},
                "thoughtSignature": "sig",
            },
        ),
        (USAGE, USAGE_JSON),
        (
            Cost(0.5, 1.25, 0.0, 0.0, 1.75),
            {"input": 0.5, "output": 1.25, "cacheRead": 0, "cacheWrite": 0, "total": 1.75},
        ),
        (
            UserMessage(content="hello", timestamp=1),
            {"role": "user", "content": "hello", "timestamp": 1},
        ),
        (
            UserMessage(
                content=[TextContent("look"), ImageContent("AA==", "image/jpeg")], timestamp=2
            ),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "data": "AA==", "mimeType": "image/jpeg"},
                ],
                "timestamp": 2,
            },
        ),
        (PARTIAL, PARTIAL_JSON),
        (
            FAILED,
            {
                "role": "assistant",
                "content": [],
                "api": "agy",
                "provider": "antigravity",
                "model": "gemini-3-pro",
                "usage": {
                    "input": 0,
                    "output": 0,
                    "cacheRead": 0,
                    "cacheWrite": 0,
                    "totalTokens": 0,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                },
                "stopReason": "error",
                "errorMessage": FAILED.error_message,
                "timestamp": 1735689600001,
            },
        ),
        (
            ToolResultMessage(
                tool_call_id="call_1",
                tool_name="read",
                content=[TextContent("file body")],
                details={"bytes": 9},
                is_error=False,
                timestamp=3,
            ),
            {
                "role": "toolResult",
                "toolCallId": "call_1",
                "toolName": "read",
                "content": [{"type": "text", "text": "file body"}],
                "details": {"bytes": 9},
                "isError": False,
                "timestamp": 3,
            },
        ),
        (
            Tool(
                "read",
                "Read a file",
                {"type": "object", "properties": {"path": {"type": "string"}}},
            ),
            {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        ),
        (Context(), {"messages": []}),
        (
            Context("be brief", [UserMessage(content="hi", timestamp=1)], [Tool("t", "d", {})]),
            {
                "systemPrompt": "be brief",
                "messages": [{"role": "user", "content": "hi", "timestamp": 1}],
                "tools": [{"name": "t", "description": "d", "parameters": {}}],
            },
        ),
        (
            Model(
                id="gemini-3-pro",
                name="Gemini 3 Pro (agy)",
                api="agy",
                provider="antigravity",
                base_url="",
                reasoning=True,
                input=["text", "image"],
                cost=ModelCost(),
                context_window=1048576,
                max_tokens=65536,
            ),
            {
                "id": "gemini-3-pro",
                "name": "Gemini 3 Pro (agy)",
                "api": "agy",
                "provider": "antigravity",
                "baseUrl": "",
                "reasoning": True,
                "input": ["text", "image"],
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                "contextWindow": 1048576,
                "maxTokens": 65536,
            },
        ),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, dict) else "json",
)
def test_exact_json(value: Any, expected: dict[str, Any]) -> None:
    assert value.to_json() == expected
    assert type(value).from_json(expected) == value
    assert roundtrip_through_text(value) == value


def test_key_order_follows_pi_declarations() -> None:
    message = AssistantMessage(
        content=[],
        api="a",
        provider="p",
        model="m",
        response_id="r1",
        stop_reason="aborted",
        error_message="aborted by the user",
        timestamp=5,
    )
    assert list(message.to_json()) == [
        "role",
        "content",
        "api",
        "provider",
        "model",
        "responseId",
        "usage",
        "stopReason",
        "errorMessage",
        "timestamp",
    ]


def test_json_text_writes_numbers_like_javascript() -> None:
    usage = Usage(1, 2, 3, 4, 10, Cost(0.0, 2.0, 0.25, 0.0, 2.25))
    text = json.dumps(usage.to_json(), separators=(",", ":"))
    assert text == (
        '{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"totalTokens":10,'
        '"cost":{"input":0,"output":2,"cacheRead":0.25,"cacheWrite":0,"total":2.25}}'
    )


def test_optional_extras_round_trip() -> None:
    message = AssistantMessage(
        content=[ThinkingContent("x", thinking_signature=""), CALL],
        api="a",
        provider="p",
        model="m",
        response_model="m-2025",
        response_id="resp_1",
        diagnostics=[{"type": "retry", "timestamp": 9, "error": {"message": "busy"}}],
        stop_reason="toolUse",
        timestamp=7,
    )
    data = message.to_json()
    assert data["responseModel"] == "m-2025"
    assert data["responseId"] == "resp_1"
    assert data["diagnostics"] == [{"type": "retry", "timestamp": 9, "error": {"message": "busy"}}]
    # An empty signature is a value pi keeps, unlike a missing one.
    assert data["content"][0] == {"type": "thinking", "thinking": "x", "thinkingSignature": ""}
    assert AssistantMessage.from_json(data) == message
    assert roundtrip_through_text(message) == message


def test_model_extras_round_trip() -> None:
    model = Model(
        id="m",
        name="M",
        api="agy",
        provider="antigravity",
        base_url="http://127.0.0.1",
        reasoning=False,
        input=("text",),
        cost=ModelCost(1.5, 3, 0.1, 0),
        context_window=10,
        max_tokens=5,
        headers={"x-a": "b"},
        thinking_level_map={"off": None, "high": "HIGH"},
        compat={"supportsStore": False},
    )
    data = model.to_json()
    assert data["headers"] == {"x-a": "b"}
    assert data["thinkingLevelMap"] == {"off": None, "high": "HIGH"}
    assert data["compat"] == {"supportsStore": False}
    assert data["cost"] == {"input": 1.5, "output": 3, "cacheRead": 0.1, "cacheWrite": 0}
    assert roundtrip_through_text(model) == model


def test_lists_and_tuples_compare_equal_and_values_are_frozen() -> None:
    a = UserMessage(content=[TextContent("x")], timestamp=1)
    b = UserMessage(content=(TextContent("x"),), timestamp=1)
    assert a == b
    assert isinstance(a.content, tuple)
    with pytest.raises(AttributeError):
        a.timestamp = 2  # type: ignore[misc]
    assert Context(messages=[a]) == Context(messages=(b,))


def test_dispatchers() -> None:
    assert content_from_json(
        {"type": "image", "data": "", "mimeType": "image/png"}
    ) == ImageContent("", "image/png")
    assert message_from_json({"role": "user", "content": "x", "timestamp": 0}) == UserMessage(
        content="x", timestamp=0
    )
    assert isinstance(message_from_json(PARTIAL_JSON), AssistantMessage)
    assert isinstance(
        message_from_json(
            {
                "role": "toolResult",
                "toolCallId": "c",
                "toolName": "t",
                "content": [],
                "isError": True,
                "timestamp": 0,
            }
        ),
        ToolResultMessage,
    )


def test_unknown_keys_are_ignored() -> None:
    assert TextContent.from_json({"type": "text", "text": "a", "future": 1}) == TextContent("a")


def test_integral_float_counts_are_accepted() -> None:
    data = dict(USAGE_JSON, input=120.0)
    usage = Usage.from_json(data)
    assert usage.input == 120
    assert isinstance(usage.input, int)


# --- decode errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (content_from_json, {"type": "video"}),
        (content_from_json, []),
        (TextContent.from_json, {"type": "text"}),
        (TextContent.from_json, {"type": "text", "text": 3}),
        (TextContent.from_json, {"type": "thinking", "thinking": "x"}),
        (ToolCall.from_json, {"type": "toolCall", "id": "c", "name": "n", "arguments": "{}"}),
        (Usage.from_json, dict(USAGE_JSON, input=True)),
        (Usage.from_json, dict(USAGE_JSON, output=1.5)),
        (Usage.from_json, {k: v for k, v in USAGE_JSON.items() if k != "cost"}),
        (message_from_json, {"role": "system", "content": "x", "timestamp": 0}),
        (message_from_json, dict(PARTIAL_JSON, stopReason="finished")),
        (
            message_from_json,
            dict(PARTIAL_JSON, content=[{"type": "image", "data": "", "mimeType": "image/png"}]),
        ),
        (
            message_from_json,
            {"role": "user", "content": [{"type": "thinking", "thinking": "x"}], "timestamp": 0},
        ),
        (event_from_json, {"type": "message_start"}),
        (event_from_json, {"type": "text_delta", "contentIndex": 0, "delta": "x"}),
        (event_from_json, {"type": "done", "reason": "error", "message": PARTIAL_JSON}),
        (event_from_json, {"type": "error", "reason": "stop", "error": PARTIAL_JSON}),
        (Model.from_json, {"id": "m"}),
        (StreamOptions.from_json, {"transport": "carrier-pigeon"}),
        (SimpleStreamOptions.from_json, {"reasoning": "extreme"}),
    ],
)
def test_bad_json_raises_decode_error(decode: Any, data: Any) -> None:
    with pytest.raises(DecodeError):
        decode(data)


# --- events ------------------------------------------------------------------------------------

PARTIAL_EVENTS: list[tuple[Any, dict[str, Any]]] = [
    (StartEvent(partial=PARTIAL), {"type": "start"}),
    (TextStartEvent(content_index=1, partial=PARTIAL), {"type": "text_start", "contentIndex": 1}),
    (
        TextDeltaEvent(content_index=1, delta="Do", partial=PARTIAL),
        {"type": "text_delta", "contentIndex": 1, "delta": "Do"},
    ),
    (
        TextEndEvent(content_index=1, content="Done.", partial=PARTIAL),
        {"type": "text_end", "contentIndex": 1, "content": "Done."},
    ),
    (
        ThinkingStartEvent(content_index=0, partial=PARTIAL),
        {"type": "thinking_start", "contentIndex": 0},
    ),
    (
        ThinkingDeltaEvent(content_index=0, delta="Read", partial=PARTIAL),
        {"type": "thinking_delta", "contentIndex": 0, "delta": "Read"},
    ),
    (
        ThinkingEndEvent(content_index=0, content="Reading the file.", partial=PARTIAL),
        {"type": "thinking_end", "contentIndex": 0, "content": "Reading the file."},
    ),
    (
        ToolCallStartEvent(content_index=2, partial=PARTIAL),
        {"type": "toolcall_start", "contentIndex": 2},
    ),
    (
        ToolCallDeltaEvent(content_index=2, delta='{"path":', partial=PARTIAL),
        {"type": "toolcall_delta", "contentIndex": 2, "delta": '{"path":'},
    ),
    (
        ToolCallEndEvent(content_index=2, tool_call=CALL, partial=PARTIAL),
        {
            "type": "toolcall_end",
            "contentIndex": 2,
            "toolCall": {
                "type": "toolCall",
                "id": "call_1",
                "name": "read",
                "arguments": {"path": "a.txt"},
            },
        },
    ),
]
FINAL_EVENTS: list[tuple[Any, dict[str, Any]]] = [
    (
        DoneEvent(reason="stop", message=PARTIAL),
        {"type": "done", "reason": "stop", "message": PARTIAL_JSON},
    ),
    (
        ErrorEvent(reason="error", error=FAILED),
        {"type": "error", "reason": "error", "error": FAILED.to_json()},
    ),
]


def test_there_are_twelve_event_types() -> None:
    types = {event.type for event, _ in PARTIAL_EVENTS + FINAL_EVENTS}
    assert len(types) == 12


@pytest.mark.parametrize(
    ("event", "expected"), PARTIAL_EVENTS, ids=lambda v: getattr(v, "type", "")
)
def test_partial_events_json(event: Any, expected: dict[str, Any]) -> None:
    full = {**expected, "partial": PARTIAL_JSON}
    assert event.to_json() == full
    assert list(event.to_json())[-1] == "partial"
    assert event.to_json(include_partial=False) == expected
    assert event_from_json(full) == event
    assert event_from_json(json.loads(json.dumps(full))) == event


@pytest.mark.parametrize(("event", "expected"), FINAL_EVENTS, ids=lambda v: getattr(v, "type", ""))
def test_final_events_json(event: Any, expected: dict[str, Any]) -> None:
    assert event.to_json() == expected
    # done and error carry no partial: dropping it changes nothing.
    assert event.to_json(include_partial=False) == expected
    assert event_from_json(expected) == event


def test_error_event_carries_the_message_in_error() -> None:
    event = event_from_json({"type": "error", "reason": "aborted", "error": FAILED.to_json()})
    assert isinstance(event, ErrorEvent)
    assert event.error.error_message == FAILED.error_message


# --- property: any message or event survives JSON text -----------------------------------------

texts = st.text(max_size=20)
opt_texts = st.none() | texts
ints = st.integers(min_value=0, max_value=2**53)
money = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
json_objects = st.dictionaries(texts, json_scalars, max_size=4)

text_blocks = st.builds(TextContent, texts, opt_texts)
thinking_blocks = st.builds(ThinkingContent, texts, opt_texts, st.none() | st.booleans())
image_blocks = st.builds(ImageContent, texts, texts)
tool_calls = st.builds(ToolCall, texts, texts, json_objects, opt_texts)
usages = st.builds(
    Usage, ints, ints, ints, ints, ints, st.builds(Cost, money, money, money, money, money)
)
assistant_messages = st.builds(
    AssistantMessage,
    content=st.lists(text_blocks | thinking_blocks | tool_calls, max_size=4),
    api=texts,
    provider=texts,
    model=texts,
    usage=usages,
    stop_reason=st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]),
    timestamp=ints,
    error_message=opt_texts,
    response_model=opt_texts,
    response_id=opt_texts,
)
messages = (
    assistant_messages
    | st.builds(
        UserMessage,
        content=texts | st.lists(text_blocks | image_blocks, max_size=3),
        timestamp=ints,
    )
    | st.builds(
        ToolResultMessage,
        tool_call_id=texts,
        tool_name=texts,
        content=st.lists(text_blocks | image_blocks, max_size=3),
        is_error=st.booleans(),
        details=st.none() | json_objects,
        timestamp=ints,
    )
)
index = st.integers(min_value=0, max_value=50)
events = (
    st.builds(StartEvent, partial=assistant_messages)
    | st.builds(TextStartEvent, content_index=index, partial=assistant_messages)
    | st.builds(TextDeltaEvent, content_index=index, delta=texts, partial=assistant_messages)
    | st.builds(TextEndEvent, content_index=index, content=texts, partial=assistant_messages)
    | st.builds(ThinkingStartEvent, content_index=index, partial=assistant_messages)
    | st.builds(ThinkingDeltaEvent, content_index=index, delta=texts, partial=assistant_messages)
    | st.builds(ThinkingEndEvent, content_index=index, content=texts, partial=assistant_messages)
    | st.builds(ToolCallStartEvent, content_index=index, partial=assistant_messages)
    | st.builds(ToolCallDeltaEvent, content_index=index, delta=texts, partial=assistant_messages)
    | st.builds(
        ToolCallEndEvent, content_index=index, tool_call=tool_calls, partial=assistant_messages
    )
    | st.builds(
        DoneEvent, reason=st.sampled_from(["stop", "length", "toolUse"]), message=assistant_messages
    )
    | st.builds(ErrorEvent, reason=st.sampled_from(["error", "aborted"]), error=assistant_messages)
)


@given(messages)
def test_any_message_round_trips(message: Any) -> None:
    data = json.loads(json.dumps(message.to_json()))
    assert message_from_json(data) == message
    assert message_from_json(data).to_json() == data


@given(events)
def test_any_event_round_trips(event: Any) -> None:
    data = json.loads(json.dumps(event.to_json()))
    assert event_from_json(data) == event
    assert event_from_json(data).to_json() == data


@given(
    st.builds(
        Context,
        opt_texts,
        st.lists(messages, max_size=3),
        st.none() | st.lists(st.builds(Tool, texts, texts, json_objects), max_size=2),
    )
)
def test_any_context_round_trips(context: Context) -> None:
    assert roundtrip_through_text(context) == context


# --- options -----------------------------------------------------------------------------------


def test_stream_options_json_and_secrets() -> None:
    signal = AbortSignal()
    options = SimpleStreamOptions(
        temperature=0.2,
        max_tokens=1000,
        signal=signal,
        api_key="secret-token",
        cache_retention="long",
        session_id="s1",
        headers={"x": "y"},
        timeout_ms=60000,
        max_retries=2,
        max_retry_delay_ms=0,
        metadata={"user_id": "u"},
        reasoning="high",
        thinking_budgets=ThinkingBudgets(low=1024, high=8192),
    )
    assert options.to_json() == {
        "temperature": 0.2,
        "maxTokens": 1000,
        "apiKey": "secret-token",
        "cacheRetention": "long",
        "sessionId": "s1",
        "headers": {"x": "y"},
        "timeoutMs": 60000,
        "maxRetries": 2,
        "maxRetryDelayMs": 0,
        "metadata": {"user_id": "u"},
        "reasoning": "high",
        "thinkingBudgets": {"low": 1024, "high": 8192},
    }
    assert "secret-token" not in repr(options)
    again = SimpleStreamOptions.from_json(options.to_json(), signal=signal)
    assert again == options
    assert again.signal is signal
    assert StreamOptions().to_json() == {}
    assert StreamOptions.from_json({"transport": "sse"}) == StreamOptions(transport="sse")


# --- AbortSignal -------------------------------------------------------------------------------


def test_abort_signal_flag_and_reason() -> None:
    signal = AbortSignal()
    assert not signal.aborted
    assert signal.reason is None
    signal.abort("user pressed escape")
    assert signal.aborted
    assert signal.reason == "user pressed escape"
    signal.abort("second")
    assert signal.reason == "user pressed escape"


def test_wait_returns_at_once_when_already_aborted() -> None:
    signal = AbortSignal()
    signal.abort()

    async def main() -> None:
        await asyncio.wait_for(signal.wait(), timeout=1)

    asyncio.run(main())


def test_wait_wakes_every_waiter_on_abort() -> None:
    signal = AbortSignal()

    async def main() -> None:
        waiters = [asyncio.create_task(signal.wait()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        signal.abort()
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=1)

    asyncio.run(main())


def test_abort_from_another_thread_wakes_the_loop() -> None:
    signal = AbortSignal()

    async def main() -> None:
        waiter = asyncio.create_task(signal.wait())
        await asyncio.sleep(0)
        thread = threading.Thread(target=signal.abort, args=("from thread",))
        thread.start()
        await asyncio.wait_for(waiter, timeout=2)
        thread.join()

    asyncio.run(main())
    assert signal.reason == "from thread"


def test_cancelled_waiter_is_forgotten() -> None:
    signal = AbortSignal()

    async def main() -> None:
        waiter = asyncio.create_task(signal.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert signal._waiters == []

    asyncio.run(main())
    signal.abort()  # the closed loop of a forgotten waiter must not make this fail
    assert signal.aborted


def test_abort_after_the_waiting_loop_closed_does_not_raise() -> None:
    signal = AbortSignal()
    loop = asyncio.new_event_loop()
    # A waiter whose loop closed before the abort came: scheduling its wake-up is impossible.
    signal._waiters.append((loop, loop.create_future()))
    loop.close()
    signal.abort()
    assert signal.aborted
