"""The listening socket the MCP bridge and serve share (`agy_provider/http_serving.py`): what an
accepted connection is like once asyncio has it."""

from __future__ import annotations

import asyncio
import socket

from agy_provider.http_serving import listening_socket


async def test_an_accepted_connection_sends_small_writes_at_once() -> None:
    # Nagle off (TCP_NODELAY): a stream's first chunk right after its headers must not wait for
    # the client's delayed ACK (~40 ms), which it did while the socket's proto was left 0.
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(
        Probe, sock=listening_socket("127.0.0.1", 0, 8)
    )
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
