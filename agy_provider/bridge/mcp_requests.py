"""The MCP requests the bridge reads or answers itself, before the SDK or instead of it: the
handshake-era version fix and a JSON-RPC error response.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import mcp_types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from starlette.types import Scope
from starlette.types import Send

__all__ = ["handshake_era", "respond_error"]

# Logged under the bridge's name, as before these were split out of it (hosts filter by it).
log = logging.getLogger("agy_provider.bridge.mcp_bridge")

_VERSION_HEADER_KEY = b"mcp-protocol-version"
_SESSION_HEADER_KEY = b"mcp-session-id"


def handshake_era(
    scope: Scope, headers: Sequence[tuple[bytes, bytes]], body: bytes | None
) -> Scope:
    """Serve a handshake-era request whose `MCP-Protocol-Version` is newer than the SDK's era table.

    The SDK sends any request whose version header is not a handshake version down its stateless
    2026-07-28 path, which refuses a request without that era's `_meta` envelope (400). agy's
    client negotiates with `initialize` and then sends `MCP-Protocol-Version: 2026-07-28`
    (AGY-FORMATS §2): such a request (no envelope, or a GET/DELETE of a session) is served on the
    handshake path, as the newest handshake version. A real 2026-07-28 request keeps its header.
    """
    version = next((v for k, v in headers if k.lower() == _VERSION_HEADER_KEY), None)
    if version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS:
        return scope
    if body is not None and _has_modern_envelope(body):
        return scope
    if body is None and not any(k.lower() == _SESSION_HEADER_KEY for k, _ in headers):
        return scope
    log.debug(
        "MCP-Protocol-Version %r on a handshake-era request: served as %s",
        version.decode("latin-1"),
        LATEST_HANDSHAKE_VERSION,
    )
    fixed = [
        (k, LATEST_HANDSHAKE_VERSION.encode("ascii") if k.lower() == _VERSION_HEADER_KEY else v)
        for k, v in headers
    ]
    return {**scope, "headers": fixed}


def _has_modern_envelope(body: bytes) -> bool:
    """Whether a POST body carries the per-request envelope of MCP 2026-07-28 (`params._meta`)."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return True  # not JSON: leave it to the SDK to answer
    params = decoded.get("params") if isinstance(decoded, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and mcp_types.PROTOCOL_VERSION_META_KEY in meta


async def respond_error(send: Send, status: int, message: str) -> None:
    """A JSON-RPC error body (no id) with an HTTP status, as MCP clients can read it."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
