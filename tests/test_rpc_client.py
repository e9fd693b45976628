"""The Connect client against an injected httpx transport that replays frames (no server)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agy_provider.errors import RpcError
from agy_provider.errors import UsageError
from agy_provider.rpc.client import CSRF_HEADER
from agy_provider.rpc.client import SERVICE
from agy_provider.rpc.client import ConnectClient
from agy_provider.rpc.client import assert_loopback
from agy_provider.wire.connect import encode_envelope
from agy_provider.wire.connect import encode_json_envelope


def frames(*messages: dict[str, Any], end: dict[str, Any] | None = None) -> bytes:
    body = b"".join(encode_json_envelope(m) for m in messages)
    return body + encode_json_envelope(end if end is not None else {}, end_stream=True)


class Chunked(httpx.AsyncByteStream):
    """A response body delivered in fixed-size pieces, as a socket might."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.data), self.size):
            yield self.data[i : i + self.size]


def client_for(handler) -> ConnectClient:  # type: ignore[no-untyped-def]
    return ConnectClient(
        "https://127.0.0.1:1", csrf_token="tok123", transport=httpx.MockTransport(handler)
    )


async def test_unary_call_sends_connect_headers_and_the_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"metadata": {"rootConversationId": "c"}})

    client = client_for(handler)
    answer = await client.call("GetConversationMetadata", {"conversationId": "c"})
    assert answer == {"metadata": {"rootConversationId": "c"}}
    (request,) = seen
    assert request.url.path == f"/{SERVICE}/GetConversationMetadata"
    assert request.headers["connect-protocol-version"] == "1"
    assert request.headers["content-type"] == "application/json"
    assert request.headers[CSRF_HEADER] == "tok123"
    assert json.loads(request.content) == {"conversationId": "c"}
    assert "tok123" not in repr(client)
    await client.aclose()


async def test_errors_are_typed_with_code_message_and_body() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("GetConversationMetadata"):
            return httpx.Response(500, text="trajectory not found")
        if request.url.path.endswith("Heartbeat"):
            return httpx.Response(
                401, json={"code": "unauthenticated", "message": "missing CSRF token"}
            )
        return httpx.Response(404, json={"code": "unimplemented", "message": "no such method"})

    client = client_for(handler)
    with pytest.raises(RpcError) as info:
        await client.call("GetConversationMetadata", {"conversationId": "x"})
    assert info.value.status == 500 and "trajectory not found" in info.value.message
    assert info.value.body == b"trajectory not found"
    with pytest.raises(RpcError) as info:
        await client.call("Heartbeat")
    assert info.value.code == "unauthenticated" and "csrf" in info.value.message.lower()
    assert "signed" not in info.value.message.lower()
    assert not await client.heartbeat()
    await client.aclose()


@pytest.mark.parametrize("size", [1, 3, 7, 4096])
async def test_stream_frames_split_or_packed_decode_the_same(size: int) -> None:
    messages = [{"update": {"n": n, "text": "x" * n}} for n in range(20)]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["content-type"] == "application/connect+json"
        assert request.content[:1] == b"\x00"  # the request is enveloped too
        return httpx.Response(200, stream=Chunked(frames(*messages), size))

    client = client_for(handler)
    got = [m async for m in client.stream("StreamAgentStateUpdates", {"conversationId": "c"})]
    assert got == messages
    await client.aclose()


@pytest.mark.parametrize("size", [65536, 256 * 1024, 10**7])
async def test_big_frames_fed_in_pieces_parse_once_whole_between_small_ones(size: int) -> None:
    """Frames over PARSE_OFF_LOOP_BYTES, arriving in pieces (or in one read with the frames
    around them), come out whole and in order with the small frames around them; a growing
    answer sent whole each time comes out grown each time."""
    answer = "Line with é, ☕ and 𝄞 — ok.\r\n" * 30000  # ~1 MB of JSON string, twice a frame
    messages: list[dict[str, Any]] = [{"update": {"n": 0}}]
    for n in (1, 2, 3):
        text = answer[: len(answer) * n // 3]
        messages.append({"update": {"n": n, "response": text, "modifiedResponse": text}})
        messages.append({"update": {"n": n, "small": "x" * n}})

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Chunked(frames(*messages), size))

    client = client_for(handler)
    got = [m async for m in client.stream("StreamAgentStateUpdates", {"conversationId": "c"})]
    assert got == messages
    await client.aclose()


async def test_stream_errors() -> None:
    bodies = {
        "trailer": frames(
            {"a": 1}, end={"error": {"code": "not_found", "message": "trajectory not found"}}
        ),
        "compressed": encode_envelope(b"{}")[:0] + b"\x01\x00\x00\x00\x02{}",
        "dropped": encode_json_envelope({"a": 1}),
        "truncated": encode_json_envelope({"a": 1})[:-2],
    }
    for name, body in bodies.items():
        client = client_for(lambda request, body=body: httpx.Response(200, content=body))
        with pytest.raises(RpcError) as info:
            [m async for m in client.stream("StreamAgentStateUpdates", {})]
        assert info.value.code in {"not_found", "internal", "unavailable"}, name
        await client.aclose()
    status = client_for(
        lambda request: httpx.Response(
            401, json={"code": "unauthenticated", "message": "missing CSRF token"}
        )
    )
    with pytest.raises(RpcError) as info:
        [m async for m in status.stream("StreamAgentStateUpdates", {})]
    assert info.value.status == 401  # checked before any frame is read


async def test_a_bad_frame_is_skipped_and_the_stream_goes_on() -> None:
    body = encode_envelope(b"{not json") + frames({"ok": 1})
    client = client_for(lambda request: httpx.Response(200, content=body))
    assert [m async for m in client.stream("StreamAgentStateUpdates", {})] == [{"ok": 1}]
    await client.aclose()


async def test_a_stalled_stream_trips_the_watchdog() -> None:
    class Stall(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            import asyncio

            yield encode_json_envelope({"first": True})
            await asyncio.sleep(30)

    client = ConnectClient(
        "http://127.0.0.1:1",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, stream=Stall())),
        stream_read_timeout=0.2,
    )
    got = []
    with pytest.raises(RpcError) as info:
        async for message in client.stream("StreamAgentStateUpdates", {}):
            got.append(message)
    assert got == [{"first": True}] and info.value.code == "deadline_exceeded"
    await client.aclose()


def test_only_loopback_is_ever_called() -> None:
    for url in (
        "https://127.0.0.1:5",
        "http://localhost:5",
        "https://[::1]:5",
        "http://127.2.3.4:9",
    ):
        assert_loopback(url)
    for url in (
        "https://10.0.0.1:5",
        "https://example.com",
        "http://192.168.1.2:80",
        "https://0.0.0.0:1",
    ):
        with pytest.raises(UsageError):
            assert_loopback(url)
    with pytest.raises(UsageError):
        ConnectClient("https://example.com:443")


async def test_an_answer_nested_too_deep_is_a_typed_error() -> None:
    deep = b"[" * 3000 + b"]" * 3000
    for body in (deep, b'{"n": NaN}', b'{"n": 1e400}'):
        c = client_for(lambda request, body=body: httpx.Response(200, content=body))
        with pytest.raises(RpcError) as caught:
            await c.call("Heartbeat", {})
        await c.aclose()
        assert caught.value.code == "internal"
