"""serve's HTTP edge: the guard in front of every request (token, body cap, no token in URLs),
errors in each API's own shape, and the SSE response that aborts its turn when the client goes.

Pure ASGI, no framework state: the guard wraps the Starlette app; `SseResponse` is a Starlette
response whose body is an async iterator of SSE frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from typing import Literal
from urllib.parse import unquote_to_bytes

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from agy_provider.http_serving import read_body
from agy_provider.http_serving import replay_body

__all__ = [
    "MAX_BODY_BYTES",
    "Guard",
    "SseResponse",
    "error_body",
    "error_response",
    "shape_of",
    "sse",
    "until_disconnected",
]

log = logging.getLogger(__name__)

Shape = Literal["openai", "anthropic"]

# A request body larger than this is refused (413) as it arrives. It is far above a full
# context: a transcript at Gemini's 1M-token window is ~4-6 MB of text, and a longer one must be
# read and counted to get the error clients take for an overflow (400 `prompt is too long`,
# `context_length_exceeded`) instead of this 413; the rest is room for images.
MAX_BODY_BYTES = 32 * 1024 * 1024
# A body over the cap is still read (and dropped) up to this many times the cap, so the client
# gets its 413 instead of a connection reset mid-upload.
_DISCARD_FACTOR = 4

# What answers without the token (`GET`/`HEAD` only; `Host`/`Origin` are checked all the same).
_OPEN_PATHS = frozenset({"/", "/health"})

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def shape_of(scope: Scope) -> Shape:
    """Which API a request speaks: Anthropic's for `/v1/messages` and for requests carrying
    `anthropic-version` (its SDK's `models.list`), else OpenAI's."""
    path = str(scope.get("path", ""))
    if path.startswith("/v1/messages"):
        return "anthropic"
    headers = scope.get("headers") or ()
    return "anthropic" if any(k == b"anthropic-version" for k, _ in headers) else "openai"


def error_body(shape: Shape, status: int, message: str, param: str | None = None) -> Any:
    """An error object as the API's own clients read it."""
    if shape == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    code = "invalid_api_key" if status == 401 else None
    kind = _OPENAI_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    shape: Shape, status: int, message: str, param: str | None = None
) -> JSONResponse:
    """The error as a response. Failures of agy are not worth an automatic retry by the
    clients' SDKs (they retry 5xx and 429 unless told): `x-should-retry: false` says so."""
    headers = {"x-should-retry": "false"} if status >= 429 else None
    return JSONResponse(error_body(shape, status, message, param), status, headers=headers)


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE frame (`event:` line when named) holding `data` as compact JSON."""
    line = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {line}\n\n".encode()


async def until_disconnected(receive: Receive) -> None:
    """Return when the client has gone (the request's body was read already)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


class SseResponse(Response):
    """`text/event-stream` from an async iterator of frames; the client going away cancels the
    iterator at once, wherever it waits (closing it aborts the turn behind it), not only at the
    next write. A slow reader holds the iterator at `send` (uvicorn's flow control), so each
    stream buffers at most the transport's high-water mark."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes]) -> None:  # no body: headers only
        self.frames = frames
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        gone = asyncio.ensure_future(until_disconnected(receive))
        try:
            done, _ = await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            if pump in done:
                with contextlib.suppress(OSError):  # the client left during the last write
                    pump.result()
        finally:
            for task in (pump, gone):
                task.cancel()
            await asyncio.gather(pump, gone, return_exceptions=True)
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _pump(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async for frame in self.frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class Guard:
    """Every request: a `Host` naming this server and no foreign browser `Origin` (DNS
    rebinding), the token (`Authorization: Bearer` or `x-api-key`, compared in constant time),
    never in the URL, and a body at most `max_body` bytes, counted as it arrives.

    Refusals are answered here, in the API's shape (403, 401, 413), before the app sees
    anything; the body is read ahead and handed to the app whole. No CORS headers, ever.
    `GET`/`HEAD /` and `/health` need no token (clients probe the base URL so, routers and
    supervisors the health; neither says anything).
    """

    def __init__(self, app: ASGIApp, token: str, *, max_body: int = MAX_BODY_BYTES) -> None:
        if not token:
            raise ValueError("serve needs a token")
        self.app = app
        self._token = token.encode()
        self.max_body = max_body
        self._hosts: frozenset[str] = frozenset()
        self._any_address = False

    def serve_at(self, host: str, port: int) -> None:
        """The address the server is bound to: what `Host` and `Origin` may name — the loopback
        names and `host` at `port` (any IP address for a wildcard bind: a DNS rebinding attack
        needs a name)."""
        names = {"127.0.0.1", "localhost", "[::1]", host if ":" not in host else f"[{host}]"}
        hosts = {f"{name}:{port}" for name in names}
        if port == 80:
            hosts |= names
        self._hosts = frozenset(h.lower() for h in hosts)
        self._any_address = host in ("0.0.0.0", "::", "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        shape = shape_of(scope)
        foreign = self._foreign(scope.get("headers") or ())
        if foreign:
            await self._refuse(scope, send, shape, 403, foreign)
            return
        if scope.get("path") in _OPEN_PATHS and scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if self._token in unquote_to_bytes(scope.get("query_string", b"")):
            await self._refuse(
                scope,
                send,
                shape,
                401,
                "the token must never be in the URL (it would be "
                "logged); send it as `Authorization: Bearer <token>` or `x-api-key`",
            )
            return
        if not self._authorised(scope.get("headers") or ()):
            await self._refuse(
                scope,
                send,
                shape,
                401,
                "missing or wrong token: send `Authorization: Bearer "
                "<token>` or `x-api-key: <token>` (agy-provider serve printed it at start)",
            )
            return
        try:
            body = await read_body(
                receive,
                self.max_body,
                declared=_declared_length(scope),
                read_up_to=self.max_body * _DISCARD_FACTOR,
            )
        except ClientDisconnect:
            body = b""  # the client left: an empty body, which starts no turn
        if body is None:
            await self._refuse(
                scope, send, shape, 413, f"the request body is larger than {self.max_body} bytes"
            )
            return
        await self.app(scope, replay_body(body, receive), send)

    def _foreign(self, headers: Any) -> str:
        """Why `Host`/`Origin` name another site ("" when they do not): a page that reached
        this port through a DNS name of its own (rebinding) must not be served."""
        host = origin = None
        for name, value in headers:
            if name == b"host":
                host = value.decode("latin-1").lower()
            elif name == b"origin":
                origin = value.decode("latin-1").lower()
        if not self._hosts:  # not bound yet (an app used without `serve_at`): nothing to check
            return ""
        if host is None or not self._ours(host):
            return (
                f"the Host header {host!r} does not name this server: use "
                f"http://127.0.0.1:PORT or http://localhost:PORT (DNS rebinding protection)"
            )
        if origin is not None:
            scheme, _, rest = origin.partition("://")
            if scheme not in ("http", "https") or not self._ours(rest.rstrip("/")):
                return f"requests from the web page at {origin!r} are not served"
        return ""

    def _ours(self, host: str) -> bool:
        if host in self._hosts:
            return True
        if not self._any_address:
            return False
        name = host[1:].partition("]")[0] if host.startswith("[") else host.partition(":")[0]
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def _authorised(self, headers: Any) -> bool:
        presented = b""
        for name, value in headers:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                presented = value[7:].strip()
            elif name == b"x-api-key" and not presented:
                presented = value.strip()
        # One comparison of equal work whatever was presented (none, short, long).
        return hmac.compare_digest(presented, self._token) and bool(presented)

    @staticmethod
    async def _refuse(scope: Scope, send: Send, shape: Shape, status: int, message: str) -> None:
        log.info("refused %s %s: %d", scope.get("method"), scope.get("path"), status)
        response = error_response(shape, status, message)
        if status == 413:
            response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, _no_receive, send)


def _declared_length(scope: Scope) -> int:
    """The request's Content-Length, 0 when it gives none in digits."""
    declared = 0
    for name, value in scope.get("headers") or ():
        if name == b"content-length" and value.isdigit():
            declared = int(value)
    return declared


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
