"""What the MCP bridge's HTTP server and serve's share: a request body read ahead and handed to
the app again.
"""

from __future__ import annotations

from starlette.types import Message
from starlette.types import Receive

__all__ = ["replay_body"]


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
