"""A minimal HTTP/1.1 server side over asyncio streams, for the simulated language server.

Owns reading one request (Content-Length or chunked body) and writing a whole or chunked response.
"""

from __future__ import annotations

import asyncio
import http
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "ChunkedResponse",
    "HttpProtocolError",
    "HttpRequest",
    "read_request",
    "write_response",
]

# The request head (line + headers). httpx sends a few hundred bytes; 64 KiB is the usual server
# limit and is what the asyncio StreamReader must be created with (`limit=`).
MAX_HEADER_BYTES: Final = 64 * 1024
# Request bodies are small JSON (a prompt is the largest); 16 MiB refuses a runaway upload without
# refusing any prompt a client would send over RPC.
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
_MAX_CHUNK_LINE: Final = 1024


class HttpProtocolError(Exception):
    """The peer did not speak HTTP/1.1 as we read it; answer `status` and close."""

    def __init__(self, message: str, status: int = 400) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case; a repeated header keeps its last value."""

    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this one."""
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """Read one request; None when the peer closed the connection before sending a byte.

    Raises:
        HttpProtocolError: a malformed or oversized request (the caller answers and closes).
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HttpProtocolError("connection closed in the middle of a request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpProtocolError("request head too large", 431) from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpProtocolError(f"bad request line {lines[0][:80]!r}")
    method, path, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpProtocolError(f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    body = await _read_body(reader, headers)
    return HttpRequest(method, path, version, headers, body)


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader)
        length_text = headers.get("content-length", "0")
        if not (length_text.isascii() and length_text.isdigit()):
            raise HttpProtocolError(f"bad Content-Length {length_text[:40]!r}")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise HttpProtocolError(f"request body of {length} bytes is too large", 413)
        return await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError as exc:
        raise HttpProtocolError("connection closed in the middle of a request body") from exc


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    pieces: list[bytes] = []
    total = 0
    while True:
        line = await reader.readline()
        if not line.endswith(b"\r\n") or len(line) > _MAX_CHUNK_LINE:
            raise HttpProtocolError("bad chunk size line")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise HttpProtocolError("bad chunk size") from exc
        if size == 0:
            # Trailers, if any, end with an empty line.
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            return b"".join(pieces)
        total += size
        if total > MAX_BODY_BYTES:
            raise HttpProtocolError("request body is too large", 413)
        pieces.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpProtocolError("chunk not followed by CRLF")


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = ""  # 499 and other codes the stdlib does not name
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def write_response(
    writer: asyncio.StreamWriter,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    *,
    keep_alive: bool,
) -> None:
    """Write a whole response with a Content-Length and drain it."""
    all_headers = [*headers, ("Content-Length", str(len(body)))]
    if not keep_alive:
        all_headers.append(("Connection", "close"))
    writer.write(_head(status, all_headers) + body)
    await writer.drain()


class ChunkedResponse:
    """A response whose body is sent in pieces (`Transfer-Encoding: chunked`) as it is made.

    `end()` sends the terminating zero-size chunk; a response that is never ended and whose
    connection is closed reads as truncated to the client, which is how a dropped stream looks.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._ended = False

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        """Send the status line and headers."""
        self._writer.write(_head(status, [*headers, ("Transfer-Encoding", "chunked")]))
        await self._writer.drain()

    async def write(self, data: bytes) -> None:
        """Send `data` as one chunk and drain, so the peer can read it now."""
        if not data:
            return
        self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._writer.drain()

    async def end(self) -> None:
        """Send the last chunk; the connection can carry another request afterwards."""
        if not self._ended:
            self._ended = True
            self._writer.write(b"0\r\n\r\n")
            await self._writer.drain()
