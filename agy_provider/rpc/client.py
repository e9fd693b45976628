"""A Connect RPC client for agy's language server, on httpx; the framing lives in `wire/connect.py`.

Loopback only: every URL is checked, TLS is unverified only for loopback, proxies are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import ipaddress
import json
import ssl
import urllib.parse
from collections.abc import AsyncGenerator
from collections.abc import Mapping
from typing import Any

import httpx

from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import RpcError
from agy_provider.errors import UsageError
from agy_provider.rpc.loopback_http import LoopbackTransport
from agy_provider.wire import jsontext
from agy_provider.wire.connect import CONNECT_PROTOCOL_VERSION
from agy_provider.wire.connect import CONTENT_TYPE_CONNECT_JSON
from agy_provider.wire.connect import CONTENT_TYPE_JSON
from agy_provider.wire.connect import ConnectStreamDecoder
from agy_provider.wire.connect import SkippedFrame
from agy_provider.wire.connect import encode_json_envelope
from agy_provider.wire.connect import parse_error_body
from agy_provider.workers import off_loop

__all__ = [
    "CSRF_HEADER",
    "SERVICE",
    "ConnectClient",
    "assert_loopback",
]

SERVICE = "exa.language_server_pb.LanguageServerService"
CSRF_HEADER = "x-codeium-csrf-token"

# Time budgets (seconds), each for one kind of wait (AGY-FORMATS §4).
PROBE_TIMEOUT = 2.0  # is anything Connect listening here?
CALL_TIMEOUT = 30.0  # a unary call
STREAM_CONNECT_TIMEOUT = 10.0  # until the stream's response headers arrive
STREAM_READ_TIMEOUT = 5.0  # the watchdog: a live stream that says nothing this long is stalled

# Frames this large (in bytes received) are parsed in a worker thread: a resumed conversation's
# first update frame carries every earlier step, megabytes of JSON.
PARSE_OFF_LOOP_BYTES = 256 * 1024


def assert_loopback(url: str) -> None:
    """Refuse any URL whose host is not a loopback address (127.0.0.0/8, ::1, localhost)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise UsageError(f"refusing a non-loopback language server address: {host or url!r}")


def warm_up() -> None:
    """Do once, off the loop, what the first call would otherwise do on it: build the shared
    TLS context and import the modules httpx loads lazily on its first request."""
    _unverified_tls()
    for module in ("anyio._backends._asyncio", "httpcore._async.http11", "h11"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


@functools.cache
def _unverified_tls() -> ssl.SSLContext:
    """One TLS context for every client: building one costs milliseconds of CPU on the event
    loop (httpx does it per client), and a turn probes several ports, many turns at once."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class ConnectClient:
    """Calls one language server at `base_url` (`https://127.0.0.1:P` or `http://127.0.0.1:P`).

    `transport` lets unit tests replay captured frames; end-to-end tests use agy-sim's server.
    The CSRF token is sent on every call and never logged.
    """

    def __init__(
        self,
        base_url: str,
        *,
        csrf_token: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        call_timeout: float = CALL_TIMEOUT,
        stream_read_timeout: float = STREAM_READ_TIMEOUT,
    ) -> None:
        assert_loopback(base_url)
        self.base_url = base_url.rstrip("/")
        self.call_timeout = call_timeout
        self.stream_read_timeout = stream_read_timeout
        self._urls: dict[str, httpx.URL] = {}
        headers = {"Connect-Protocol-Version": CONNECT_PROTOCOL_VERSION}
        if csrf_token:
            headers[CSRF_HEADER] = csrf_token
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            verify=_unverified_tls(),  # loopback only (checked above): agy's cert is self-signed
            trust_env=False,
            # Ours unless a test injects one: httpx's default costs the loop ~2x per request.
            transport=transport or LoopbackTransport(ssl_context=_unverified_tls()),
            timeout=httpx.Timeout(call_timeout, connect=PROBE_TIMEOUT),
        )

    def __repr__(self) -> str:  # never shows the token
        return f"ConnectClient({self.base_url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    def _path(self, method: str) -> httpx.URL:
        """The method's absolute URL, parsed once: httpx parses and merges a relative URL
        with the base on every request (~10% of a request's CPU on the loop)."""
        url = self._urls.get(method)
        if url is None:
            if not method.isidentifier():
                raise UsageError(f"not an RPC method name: {method!r}")
            url = self._urls[method] = httpx.URL(f"{self.base_url}/{SERVICE}/{method}")
        return url

    async def call(
        self, method: str, body: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """A unary call; returns the response object. Raises `RpcError` for any failure."""
        try:
            response = await self._http.post(
                self._path(method),
                content=json.dumps(body or {}).encode(),
                headers={"Content-Type": CONTENT_TYPE_JSON},
                timeout=timeout or self.call_timeout,
            )
        except httpx.TimeoutException as exc:
            raise RpcError("deadline_exceeded", f"{method} timed out") from exc
        except httpx.HTTPError as exc:
            raise RpcError("unavailable", f"{method} failed: {exc}") from exc
        if response.status_code != 200:
            raise _named(method, parse_error_body(response.status_code, response.content))
        try:
            value = (
                jsontext.loads(response.content, f"{method}'s answer") if response.content else {}
            )
        except DecodeError as exc:
            raise RpcError(
                "internal", f"{method} answered with invalid JSON: {exc}", body=response.content
            ) from exc
        if not isinstance(value, dict):
            raise RpcError("internal", f"{method} answered with JSON that is not an object")
        return value

    async def heartbeat(self, *, timeout: float = PROBE_TIMEOUT) -> bool:
        """True when a Connect server answers `Heartbeat` here."""
        try:
            await self.call("Heartbeat", {}, timeout=timeout)
        except RpcError:
            return False
        return True

    async def stream(
        self,
        method: str,
        body: Mapping[str, Any],
        *,
        read_timeout: float | None = None,
        skip_first_over: int | None = None,
    ) -> AsyncGenerator[dict[str, Any] | SkippedFrame, None]:
        """A server stream: yields each message. Ends quietly on a clean end-of-stream.

        With `skip_first_over=N` a first message of more than N bytes is not parsed: a
        `SkippedFrame` stands in for it.

        Raises `RpcError` for an HTTP error, an error trailer, a stall longer than the watchdog
        (`deadline_exceeded`), a dropped connection (`unavailable`) or broken framing (`internal`).
        A frame that is not a JSON object is skipped.
        """
        watchdog = read_timeout or self.stream_read_timeout
        request = self._http.build_request(
            "POST",
            self._path(method),
            content=encode_json_envelope(dict(body)),
            headers={"Content-Type": CONTENT_TYPE_CONNECT_JSON},
            timeout=httpx.Timeout(None, connect=STREAM_CONNECT_TIMEOUT),
        )
        try:
            response = await asyncio.wait_for(
                self._http.send(request, stream=True), STREAM_CONNECT_TIMEOUT
            )
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise RpcError("deadline_exceeded", f"{method} did not answer") from exc
        except httpx.HTTPError as exc:
            raise RpcError("unavailable", f"{method} failed: {exc}") from exc
        try:
            if response.status_code != 200:
                raise _named(method, parse_error_body(response.status_code, await response.aread()))
            decoder = ConnectStreamDecoder(skip_first_over=skip_first_over)
            chunks = response.aiter_bytes().__aiter__()
            unparsed = 0  # bytes fed since the last message came out
            while True:
                try:
                    # asyncio.timeout, not wait_for: no task per chunk on the loop.
                    async with asyncio.timeout(watchdog):
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise RpcError(
                        "deadline_exceeded", f"{method} stalled for {watchdog:.0f}s"
                    ) from exc
                except httpx.HTTPError as exc:
                    raise RpcError("unavailable", f"{method} stream broke: {exc}") from exc
                unparsed += len(chunk)
                # A big frame's pieces before its last are only kept (no thread hop for them).
                if unparsed >= PARSE_OFF_LOOP_BYTES and decoder.envelopes.completes_frame(chunk):
                    # A big frame (the first one replays every earlier step of a resumed
                    # conversation): parsing megabytes of JSON must not stall the loop.
                    messages = await off_loop(_take_messages, decoder, chunk, method)
                else:
                    messages = _take_messages(decoder, chunk, method)
                if messages:
                    unparsed = 0
                for message in messages:
                    yield message
                if decoder.ended:
                    return
            try:
                decoder.end_of_input()
            except DecodeError as exc:
                raise RpcError("unavailable", f"{method} stream dropped: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await response.aclose()


def _take_messages(
    decoder: ConnectStreamDecoder, chunk: bytes, method: str
) -> list[dict[str, Any] | SkippedFrame]:
    """Feed a chunk and take every complete message; a bad frame is skipped."""
    decoder.feed(chunk)
    messages: list[dict[str, Any] | SkippedFrame] = []
    while True:
        try:
            message = next(decoder.messages(), None)
        except FramingError as exc:
            raise RpcError("internal", f"{method} stream framing broke: {exc}") from exc
        except DecodeError:
            continue  # one bad frame: skip it, keep the stream
        if message is None:
            return messages
        messages.append(message)


def _named(method: str, error: RpcError) -> RpcError:
    """Say which call failed; a CSRF refusal says what it is rather than looking like sign-out."""
    if error.status == 401 and "csrf" in error.message.lower():
        message = (
            f"{method}: agy's language server refused us: {error.message} "
            "(this agy needs --csrf_token; keep csrf enabled in the config)"
        )
    else:
        message = f"{method}: {error.message}"
    return RpcError(error.code, message, status=error.status, body=error.body)
