"""serve's request log (`serve -v`): one line per request — who, what, which model answered,
which conversation, how it ended and how fast — and with `-vv` its headers, secrets masked.

Pure ASGI around the door, so refusals are logged too. Never a body, a query string or a
token: header values that carry secrets are masked by name, and the token by value anywhere.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

__all__ = ["RequestLog", "RequestRecord", "Seen", "mask_headers", "record_of"]

_KEY = "agy_provider.request"
_MASK = "***"
# Headers whose values are secrets whatever they hold; names containing these parts too.
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "cookie", "set-cookie", "api-key"}
)
_SECRET_PARTS = ("token", "secret", "key", "auth", "cookie", "password", "session")
# Conversations the server answered, remembered to tell a continued one from a new one: as
# many as `DeliveredMessages` keeps answers, so both forget on the same scale.
_SEEN = 4096


@dataclasses.dataclass(slots=True)
class RequestRecord:
    """What one request's log line says; routes fill what they learn (the model, the
    conversation), the log the rest (status, times). `key_source` names the signal that gave the
    conversation key (a field or a header); whoever decides ownership may set it."""

    started: float
    client: str
    method: str
    path: str
    model_asked: str = ""
    model_used: str = ""
    key_source: str = ""
    conversation: str = ""
    kind: str = ""  # new | continued | resumed
    status: int = 0
    first_byte: float | None = None
    total: float | None = None
    tokens: tuple[int, int] | None = None  # (input, output)

    def line(self) -> str:
        """The log line: fields in a fixed order, `-` for what is not known."""
        model = self.model_asked or "-"
        if self.model_used and self.model_used != self.model_asked:
            model = f"{model}->{self.model_used}"
        tokens = f"{self.tokens[0]}/{self.tokens[1]}" if self.tokens else "-"
        return " ".join(
            (
                time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()),
                self.client,
                self.method,
                self.path,
                f"model={model}",
                f"key={self.key_source or '-'}",
                f"conversation={self.conversation or '-'}",
                self.kind or "-",
                str(self.status or "-"),
                f"first={_seconds(self.first_byte)}",
                f"total={_seconds(self.total)}",
                f"tokens={tokens}",
            )
        )


def record_of(scope: Scope) -> RequestRecord | None:
    """The request's record, for a route to fill (None outside a logged server)."""
    state = scope.get("state")
    record = state.get(_KEY) if isinstance(state, dict) else None
    return record if isinstance(record, RequestRecord) else None


class Seen:
    """The conversations this server answered, newest last, bounded."""

    def __init__(self, bound: int = _SEEN) -> None:
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._bound = bound

    def kind(self, conversation: str) -> str:
        """`continued` for a conversation seen before, else `new`; remembers it."""
        known = conversation in self._ids
        self._ids[conversation] = None
        self._ids.move_to_end(conversation)
        while len(self._ids) > self._bound:
            self._ids.popitem(last=False)
        return "continued" if known else "new"


def mask_headers(headers: Any, secret: bytes) -> str:
    """`name=value` pairs of the request's headers, secrets masked (by name, and `secret`
    wherever it appears)."""
    shown = []
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in _SECRET_HEADERS or any(part in name for part in _SECRET_PARTS):
            value = _MASK
        else:
            value = raw_value.replace(secret, _MASK.encode()) if secret else raw_value
            value = value.decode("latin-1")
        shown.append(f"{name}={value}")
    return " ".join(shown)


class RequestLog:
    """Every HTTP request gets a `RequestRecord` (in `scope["state"]`); at `verbosity` ≥ 1 its
    line is written once the response ended, at 2 its headers before it."""

    def __init__(
        self, app: ASGIApp, *, verbosity: int, write: Callable[[str], None], secret: str
    ) -> None:
        self.app = app
        self.verbosity = verbosity
        self.write = write
        self._secret = secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host, port = client if client else ("-", 0)
        record = RequestRecord(
            started=time.monotonic(),
            client=f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}",
            method=str(scope.get("method", "")),
            path=str(scope.get("path", "")),  # never the query string: it may carry anything
        )
        scope.setdefault("state", {})[_KEY] = record
        if self.verbosity >= 2:
            self.write(
                f"{record.method} {record.path} headers: "
                + mask_headers(scope.get("headers") or (), self._secret)
            )

        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = int(message["status"])
            elif (
                message["type"] == "http.response.body"
                and record.first_byte is None
                and (message.get("body") or not message.get("more_body", False))
            ):
                record.first_byte = time.monotonic() - record.started
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            record.total = time.monotonic() - record.started
            if self.verbosity >= 1:
                self.write(record.line())


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"
