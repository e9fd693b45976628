"""What the MCP bridge's HTTP server and serve's share: a request body read whole under a cap, and
handed to the app again.
"""

from __future__ import annotations

from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope

__all__ = ["read_body", "replay_body"]


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
    scope: Scope, receive: Receive, max_body: int, discard_factor: int
) -> bytes | None:
    """The whole body, or None once it passes the cap (declared or counted as it arrives).

    Past the cap nothing more is kept, but up to `discard_factor` times the cap is still
    read and dropped, so a client that is still sending sees the 413 rather than a reset
    connection; beyond that the connection is closed under it.
    """
    declared = 0
    for name, value in scope.get("headers") or ():
        if name == b"content-length" and value.isdigit():
            declared = int(value)
    if declared > max_body * discard_factor:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= max_body and declared <= max_body:
            chunks.append(chunk)
        else:
            chunks = []
        if not message.get("more_body"):
            return b"".join(chunks) if size <= max_body else None
        if size > max_body * discard_factor:
            return None
