"""HTTP/1.1 for httpx to a loopback server, on plain asyncio streams (`LoopbackTransport`).

httpx's default transport (httpcore on anyio, h11) costs the host's event loop about half a
millisecond of CPU per request and again per streamed chunk; with twenty turns each talking to
its own language server that is most of what an rpc turn costs the host beyond the database
reader. This transport does only what a loopback Connect server needs: one request at a time
per connection, keep-alive, `Content-Length`, chunked and read-to-close bodies, TLS with the
caller's context. httpx still builds requests, applies headers and timeouts, and decodes
`Content-Encoding`; `rpc_client.ConnectClient` checks that the address is loopback first.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import ssl
from collections.abc import AsyncIterator
from typing import Any
from typing import Final

import httpx

__all__ = ["LoopbackTransport"]

# A response head (status line and headers) larger than this is not a language server's.
MAX_HEAD_BYTES: Final = 64 * 1024
# Idle keep-alive connections kept per server (a turn makes one request at a time).
MAX_IDLE_PER_SERVER: Final = 4
# Reads of a body without chunks or length, and of a long `Content-Length` body, in pieces this size.
READ_BYTES: Final = 64 * 1024
# A body chunk larger than this is passed on piece by piece, each at most this large (asyncio
# reads a socket 256 KiB at a time).
CHUNK_PIECE_BYTES: Final = 256 * 1024

_Key = tuple[str, str, int]



def _unanswered(exc: httpx.HTTPError) -> bool:
    """True when the request reached a socket the server had closed (a reset, a broken pipe):
    what a request on a kept-alive connection the server closed just then meets, and proof that
    no server code read it. A bare end of stream proves nothing (the server may have read the
    request, then closed): that is not retried."""
    return isinstance(exc.__cause__, BrokenPipeError | ConnectionResetError)


def _within(seconds: float | None) -> Any:
    """A timeout scope (`asyncio.timeout`: no task per read), or none for `None`."""
    return asyncio.timeout(seconds) if seconds is not None else contextlib.nullcontext()


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def reusable(self) -> bool:
        # The server may have closed an idle connection: its EOF may be buffered already, or
        # still in the socket (readable while idle: EOF, or bytes no request asked for).
        if self.writer.is_closing() or self.reader.at_eof():
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return True
        try:
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        self.writer.transport.abort()


class LoopbackTransport(httpx.AsyncBaseTransport):
    """httpx transport speaking HTTP/1.1 over asyncio streams; `ssl_context` for `https` URLs.

    Failures are httpx's own exceptions (`ConnectError`, `ConnectTimeout`, `ReadTimeout`,
    `WriteTimeout`, `ReadError`, `RemoteProtocolError`), so callers handle them as before.
    """

    def __init__(self, *, ssl_context: ssl.SSLContext) -> None:
        self._ssl = ssl_context
        self._idle: dict[_Key, list[_Connection]] = {}
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        connection = self._reuse(key)
        while True:
            reused = connection is not None
            if connection is None:
                connection = await self._connect(key, timeouts.get("connect"), request)
            try:
                await self._send(connection, request, body, timeouts.get("write"))
                status, reason, headers, http11 = await self._read_head(
                    connection, timeouts.get("read"), request, reused
                )
                break
            except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError) as exc:
                connection.close()
                # A kept-alive connection the server closed as this request went out: nothing
                # read it, so it is sent once more on a new connection.
                if not reused or not _unanswered(exc):
                    raise
                connection = None
            except BaseException:
                connection.close()
                raise
        stream = _Body(
            self, key, connection, request, headers, status, http11, timeouts.get("read")
        )
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    def _reuse(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.reusable():
                return connection
            connection.close()
        return None

    def _put_back(self, key: _Key, connection: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if self._closed or len(idle) >= MAX_IDLE_PER_SERVER or not connection.reusable():
            connection.close()
        else:
            idle.append(connection)

    async def _connect(
        self, key: _Key, timeout: float | None, request: httpx.Request
    ) -> _Connection:
        scheme, host, port = key
        try:
            async with _within(timeout):
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self._ssl if scheme == "https" else None,
                    ssl_handshake_timeout=timeout if scheme == "https" else None,
                    limit=MAX_HEAD_BYTES,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"connecting to {host}:{port} timed out", request=request
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return _Connection(reader, writer)

    @staticmethod
    async def _send(
        connection: _Connection, request: httpx.Request, body: bytes, timeout: float | None
    ) -> None:
        lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
        lines += [b"%s: %s" % (name, value) for name, value in request.headers.raw]
        connection.writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        try:
            async with _within(timeout):
                await connection.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("sending the request timed out", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc

    @staticmethod
    async def _read_head(
        connection: _Connection, timeout: float | None, request: httpx.Request, reused: bool
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bool]:
        """(status, reason, headers, whether the server speaks HTTP/1.1 rather than 1.0)."""
        while True:
            try:
                async with _within(timeout):
                    head = await connection.reader.readuntil(b"\r\n\r\n")
            except TimeoutError as exc:
                raise httpx.ReadTimeout("no response in time", request=request) from exc
            except asyncio.IncompleteReadError as exc:
                what = "without sending a response" if not exc.partial else "mid-response"
                raise httpx.RemoteProtocolError(
                    f"Server disconnected {what}."
                    + (" (a kept-alive connection)" if reused else ""),
                    request=request,
                ) from exc
            except asyncio.LimitOverrunError as exc:
                raise httpx.RemoteProtocolError(
                    f"response head over {MAX_HEAD_BYTES} bytes", request=request
                ) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
            status_line, *header_lines = head[:-4].split(b"\r\n")
            version, _, rest = status_line.partition(b" ")
            code, _, reason = rest.partition(b" ")
            if not version.startswith(b"HTTP/1.") or not code.isdigit():
                raise httpx.RemoteProtocolError(
                    f"not an HTTP/1.1 response: {status_line[:80]!r}", request=request
                )
            headers = []
            for line in header_lines:
                name, colon, value = line.partition(b":")
                if not colon:
                    raise httpx.RemoteProtocolError(
                        f"malformed header line {line[:80]!r}", request=request
                    )
                headers.append((name.strip(), value.strip()))
            status = int(code)
            if not 100 <= status < 200:  # an interim response (100 Continue): the next head
                return status, reason, headers, version != b"HTTP/1.0"


class _Body(httpx.AsyncByteStream):
    """One response body; the connection goes back to the pool once the body was read whole."""

    def __init__(
        self,
        transport: LoopbackTransport,
        key: _Key,
        connection: _Connection,
        request: httpx.Request,
        headers: list[tuple[bytes, bytes]],
        status: int,
        http11: bool,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._key = key
        self._connection = connection
        self._request = request
        self._timeout = timeout
        self._complete = False
        self._released = False
        fields: dict[bytes, bytes] = {}
        for name, value in headers:
            fields[name.lower()] = value.lower()
        self._chunked = b"chunked" in fields.get(b"transfer-encoding", b"")
        length = fields.get(b"content-length")
        self._length: int | None = None
        if not self._chunked and length is not None:
            if not length.isdigit():
                raise httpx.RemoteProtocolError(f"bad Content-Length {length!r}", request=request)
            self._length = int(length)
        elif not self._chunked and (status in (204, 304) or request.method == "HEAD"):
            self._length = 0
        said = fields.get(b"connection", b"")  # HTTP/1.1 keeps alive unless told; 1.0 if told
        self._keep_alive = (
            (b"close" not in said if http11 else b"keep-alive" in said)
            and b"close" not in request.headers.get("connection", "").lower().encode()
            and (self._chunked or self._length is not None)
        )

    async def __aiter__(self) -> AsyncIterator[bytes]:
        reader = self._connection.reader
        try:
            if self._chunked:
                async for piece in self._chunks(reader):
                    yield piece
            elif self._length is not None:
                remaining = self._length
                while remaining:
                    piece = await self._read(reader.read(min(remaining, READ_BYTES)))
                    if not piece:
                        raise httpx.RemoteProtocolError(
                            f"Server disconnected {remaining} bytes short of the body.",
                            request=self._request,
                        )
                    remaining -= len(piece)
                    yield piece
            else:
                while piece := await self._read(reader.read(READ_BYTES)):
                    yield piece
            self._complete = True
        finally:
            if not self._complete:
                self._release()  # broken off (an error, a cancel, the caller stopped reading)

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\r\n"))
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise httpx.RemoteProtocolError(
                    f"bad chunk size line {line[:40]!r}", request=self._request
                ) from exc
            if size == 0:
                while await self._read(reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers: none of ours has any
                return
            # The chunk and its CRLF read apart: slicing the CRLF off would copy the chunk again
            # (a Connect frame of a growing answer is megabytes, once per delta).
            if size <= CHUNK_PIECE_BYTES:
                yield await self._read(reader.readexactly(size))
            else:
                # A large chunk is passed on in the pieces it arrives in: gathered here, it
                # would be copied into the reader's buffer, out of it twice, and again by the
                # caller's framing, each copy a fresh block of megabytes (issue 31); the
                # Connect framing joins the pieces once.
                remaining = size
                while remaining:
                    piece = await self._read(reader.read(min(remaining, CHUNK_PIECE_BYTES)))
                    if not piece:
                        raise httpx.RemoteProtocolError(
                            "Server disconnected mid-body.", request=self._request
                        )
                    remaining -= len(piece)
                    yield piece
            if await self._read(reader.readexactly(2)) != b"\r\n":
                raise httpx.RemoteProtocolError("a chunk without its CRLF", request=self._request)

    async def _read(self, read: Any) -> bytes:
        try:
            async with _within(self._timeout):
                data: bytes = await read
        except TimeoutError as exc:
            raise httpx.ReadTimeout("the response body stalled", request=self._request) from exc
        except asyncio.IncompleteReadError as exc:
            raise httpx.RemoteProtocolError(
                "Server disconnected mid-body.", request=self._request
            ) from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError(
                "a chunk size line too long", request=self._request
            ) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc
        return data

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._complete and self._keep_alive:
            self._transport._put_back(self._key, self._connection)
        else:
            self._connection.close()

    async def aclose(self) -> None:
        self._release()
