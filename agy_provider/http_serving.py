"""What the MCP bridge's HTTP server and serve's share: the listening socket, a request body read
whole under a cap, and that body handed to the app again.
"""

from __future__ import annotations

import socket

from starlette.requests import ClientDisconnect
from starlette.types import Message
from starlette.types import Receive

__all__ = ["listening_socket", "read_body", "replay_body"]


def listening_socket(
    host: str, port: int, backlog: int, *, reuse_address: bool = False
) -> socket.socket:
    """A non-blocking TCP socket listening on `host`:`port` (0: a free port; IPv6 when `host` has
    a colon), with `SO_REUSEADDR` when asked; closed again when a step fails. Raises `OSError`."""
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle off (TCP_NODELAY) only on a socket that
    # says it is TCP, and an accepted socket inherits this one's proto. With Nagle on, a small
    # write right after another (a stream's first chunk after its held headers) waited for the
    # client's delayed ACK: ~40 ms.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over the body already read, then the client's own messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def read_body(
    receive: Receive, limit: int, *, declared: int = 0, read_up_to: int | None = None
) -> bytes | None:
    """The whole request body, or None once it passes `limit` (as declared or as counted).

    `declared` is the body's Content-Length as the caller reads it (0 when not given). Past
    `limit` nothing more is kept, but the body is still read and dropped up to `read_up_to`
    bytes (default `limit`), so a client that is still sending can see its 413 rather than a
    reset connection; a body declared or counted past that is refused at once.

    Raises:
        ClientDisconnect: the client left before the body's end.
    """
    read_up_to = limit if read_up_to is None else read_up_to
    if declared > read_up_to:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        kept = size <= limit and declared <= limit
        if kept:
            chunks.append(chunk)
        else:
            chunks = []
        if not message.get("more_body"):
            # A body declared past the cap is refused even when fewer bytes came.
            return b"".join(chunks) if kept else None
        if size > read_up_to:
            return None
