"""LoopbackTransport (httpx over asyncio streams) against small scripted HTTP/1.1 servers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from agy_provider.rpc.client import _unverified_tls
from agy_provider.rpc.loopback_http import CHUNK_PIECE_BYTES
from agy_provider.rpc.loopback_http import LoopbackTransport
from agy_provider.sim.tls import make_server_context

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
# Only bounds a hang: a close on loopback takes a moment of the loop.
HANG = 30.0


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


@contextlib.asynccontextmanager
async def serving(
    reply: Reply, *, tls: bool = False, tmp: Path | None = None
) -> AsyncIterator[tuple[str, list[int]]]:
    """A server answering each request with `reply` (False closes the connection); yields its
    base URL and the number of requests each connection carried."""
    per_connection: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        per_connection.append(0)
        slot = len(per_connection) - 1
        try:
            while await _read_request(reader) is not None:
                per_connection[slot] += 1
                if not await reply(reader, writer):
                    break
        finally:
            writer.close()

    context = make_server_context(tmp) if tls and tmp is not None else None
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}", per_connection


async def _closed(writer: asyncio.StreamWriter, done: asyncio.Event) -> None:
    """Close the server's end now and say so once its socket is closed (its FIN, or its reset,
    is then in the client's socket on loopback)."""
    writer.close()
    await writer.wait_closed()
    done.set()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=LoopbackTransport(ssl_context=_unverified_tls()))


async def _ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Seen: yes\r\n\r\nhello")
    await writer.drain()
    return True


async def test_a_kept_alive_connection_carries_the_next_request() -> None:
    async with serving(_ok) as (url, per_connection), client() as http:
        for _ in range(3):
            response = await http.post(url + "/a", content=b"{}")
            assert (response.status_code, response.text) == (200, "hello")
            assert response.headers["x-seen"] == "yes"
    assert per_connection == [3]


async def test_tls_with_the_shared_unverified_context(tmp_path: Path) -> None:
    async with serving(_ok, tls=True, tmp=tmp_path) as (url, per_connection), client() as http:
        assert (await http.post(url + "/a", content=b"{}")).text == "hello"
        assert (await http.post(url + "/a", content=b"{}")).text == "hello"
    assert per_connection == [2]


async def test_a_chunked_body_split_into_single_bytes() -> None:
    body = b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(len(body)):
            writer.write(body[i : i + 1])
            await writer.drain()
        return True

    async with serving(chunked) as (url, per_connection), client() as http:
        async with http.stream("POST", url, content=b"x") as response:
            pieces = [piece async for piece in response.aiter_raw()]
        assert b"".join(pieces) == b"hello world" and pieces == [b"hello", b" ", b"world"]
        assert (await http.post(url, content=b"x")).text == "hello world"
    assert per_connection == [2]


async def test_a_large_chunk_is_passed_on_in_pieces_that_join_to_it() -> None:
    """A chunk over CHUNK_PIECE_BYTES (a growing answer's Connect frame) comes out in the pieces
    it arrives in, none larger than that, and they join to exactly the chunk; the connection
    is still reused after it."""
    big = bytes(range(256)) * (3 * CHUNK_PIECE_BYTES // 256 + 7)

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n3\r\nend\r\n0\r\n\r\n" % (len(big), big))
        await writer.drain()
        return True

    async with serving(chunked) as (url, per_connection), client() as http:
        async with http.stream("POST", url, content=b"x") as response:
            pieces = [piece async for piece in response.aiter_raw()]
        assert b"".join(pieces) == big + b"end"
        assert len(pieces) > 3 and max(len(p) for p in pieces) <= CHUNK_PIECE_BYTES
        assert (await http.post(url, content=b"x")).content == big + b"end"
    assert per_connection == [2]


async def test_a_server_gone_inside_a_large_chunk_is_a_protocol_error() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n" % (CHUNK_PIECE_BYTES * 3) + b"x" * CHUNK_PIECE_BYTES)
        await writer.drain()
        return False  # closes the connection a chunk short

    async with serving(cut) as (url, _), client() as http:
        with pytest.raises(httpx.RemoteProtocolError, match="mid-body"):
            await http.post(url, content=b"")


async def test_connection_close_and_a_body_read_to_the_end_are_not_reused() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()
        return False

    async with serving(until_close) as (url, per_connection), client() as http:
        assert (await http.post(url, content=b"")).text == "all of it"
        assert (await http.post(url, content=b"")).text == "all of it"
    assert per_connection == [1, 1]


async def test_an_http_1_0_answer_is_kept_alive_only_when_it_says_so() -> None:
    async def old(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return True

    async with serving(old) as (url, per_connection), client() as http:
        assert (await http.post(url, content=b"")).text == "ok"
        assert (await http.post(url, content=b"")).text == "ok"
    assert per_connection == [1, 1]


async def test_a_server_that_closed_an_idle_connection_gets_a_new_one() -> None:
    closed = asyncio.Event()

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await _ok(reader, writer)
        await _closed(writer, closed)  # without saying so
        return False

    async with serving(once) as (url, per_connection), client() as http:
        assert (await http.post(url, content=b"")).text == "hello"
        await asyncio.wait_for(closed.wait(), HANG)  # the close is on its way to us
        assert (await http.post(url, content=b"")).text == "hello"
    assert per_connection == [1, 1]


async def test_failures_are_httpx_exceptions() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return False

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        return False

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return False

    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.post("http://127.0.0.1:1/", content=b"")
        async with serving(hang_up) as (url, _):
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await http.post(url, content=b"")
        async with serving(silent) as (url, _):
            with pytest.raises(httpx.ReadTimeout):
                await http.post(url, content=b"", timeout=httpx.Timeout(5, read=0.1))
        async with serving(short) as (url, _):
            with pytest.raises(httpx.RemoteProtocolError, match="short"):
                await http.post(url, content=b"")
        async with serving(garbage) as (url, _):
            with pytest.raises(httpx.RemoteProtocolError, match=r"not an HTTP/1\.1 response"):
                await http.post(url, content=b"")


async def test_a_stream_abandoned_midway_closes_its_connection() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        await asyncio.sleep(5)
        return True

    async with serving(endless) as (url, per_connection), client() as http:
        async with http.stream("POST", url, content=b"") as response:
            async for piece in response.aiter_raw():
                assert piece == b"abc"
                break
        async with http.stream("POST", url, content=b"") as response:
            assert response.status_code == 200
    assert per_connection == [1, 1]


async def test_a_closed_idle_connection_is_not_reused_even_before_the_loop_saw_its_end() -> None:
    """The server's end of stream is in the socket, not yet read by the loop (a busy loop): the
    connection is seen to be closed before a request goes out on it."""

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await _ok(reader, writer)
        return False  # closes without saying so

    async with serving(once) as (url, per_connection), client() as http:
        assert (await http.post(url, content=b"")).text == "hello"
        time.sleep(0.05)  # the loop is held on purpose: the close arrives, unread
        assert (await http.post(url, content=b"")).text == "hello"
    assert per_connection == [1, 1]


async def test_a_request_that_meets_a_reset_kept_alive_connection_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reset proves the server read nothing: the request goes out once more, on a new
    connection."""
    import socket
    import struct

    from agy_provider.rpc import loopback_http

    reset = asyncio.Event()

    async def reset_after_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await _ok(reader, writer)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await _closed(writer, reset)  # closing now sends a reset
        return False

    # As if the reset came just after the connection was checked before reuse.
    monkeypatch.setattr(loopback_http._Connection, "reusable", lambda self: True)
    async with serving(reset_after_one) as (url, per_connection), client() as http:
        assert (await http.post(url, content=b"")).text == "hello"
        await asyncio.wait_for(reset.wait(), HANG)  # the reset is on its way to us
        assert (await http.post(url, content=b"")).text == "hello"
    assert per_connection == [1, 1]
