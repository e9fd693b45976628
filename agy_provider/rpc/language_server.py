"""Find our agy's language server: its loopback LISTEN ports, the Connect one, and proof it hosts us.

Only our child's process tree is searched, so another agy's server is never bound (AGY-FORMATS §4.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable

import psutil

from agy_provider.errors import RpcError
from agy_provider.errors import TurnError
from agy_provider.rpc.client import PROBE_TIMEOUT
from agy_provider.rpc.client import ConnectClient
from agy_provider.workers import off_loop

__all__ = ["LogPorts", "connect_to_language_server", "listening_ports", "prove_ownership"]

log = logging.getLogger(__name__)

# How long to wait for the server to answer between looks (log, process tree), backing off to
# _RETRY_MAX: each try is an HTTP request, and twenty turns may be trying at once.
_RETRY = 0.05
_RETRY_MAX = 0.4
# The process-tree scan backs off from _RETRY to this (the log, when agy writes it, is cheap).
_SCAN_MAX = 0.8
# How long agy's own log may take to name its ports before the process tree is scanned.
_LOG_GRACE = 2.0


def listening_ports(processes: Iterable[psutil.Process]) -> list[int]:
    """Loopback TCP ports in LISTEN state held by any of `processes`, lowest first."""
    ports: set[int] = set()
    for proc in processes:
        try:
            connections = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for conn in connections:
            if conn.status != psutil.CONN_LISTEN or not conn.laddr:
                continue
            try:
                loopback = ipaddress.ip_address(conn.laddr.ip).is_loopback
            except ValueError:
                loopback = False
            if loopback:
                ports.add(conn.laddr.port)
    return sorted(ports)


async def _heartbeat(client: ConnectClient) -> ConnectClient | None:
    try:
        await client.call("Heartbeat", {}, timeout=PROBE_TIMEOUT)
    except RpcError as exc:
        if exc.status == 401:
            raise  # a CSRF refusal is its own error, not "no server here"
        return None
    return client


class _Candidates:
    """One client per URL tried, kept across tries (a client costs more to make than a try)."""

    def __init__(self, csrf_token: str) -> None:
        self.csrf_token = csrf_token
        self.clients: dict[str, ConnectClient] = {}

    def client(self, url: str) -> ConnectClient:
        client = self.clients.get(url)
        if client is None:
            client = self.clients[url] = ConnectClient(url, csrf_token=self.csrf_token)
        return client

    async def probe(self, urls: list[str]) -> ConnectClient | None:
        """The first URL that answers Heartbeat, all tried at once.

        Where the scheme of a port is unknown, a TLS hello sent to the plain port can hang until
        its timeout, so every candidate runs concurrently and the first answer wins.
        """
        tasks = [asyncio.create_task(_heartbeat(self.client(url))) for url in urls]
        try:
            for finished in asyncio.as_completed(tasks):
                client = await finished
                if client is not None:
                    return client
            return None
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task

    async def aclose(self, keep: ConnectClient | None) -> None:
        for client in self.clients.values():
            if client is not keep:
                with contextlib.suppress(Exception):
                    await client.aclose()


# agy's own log line naming its server's ports and their schemes (AGY-FORMATS §1).
_LISTENING = re.compile(rb"Language server listening on random port at (\d+) for (HTTPS|HTTP)\b")
# The log is read from where the last read stopped; a line longer than this is not agy's.
_LOG_READ_LIMIT = 1024 * 1024


class LogPorts:
    """The URLs agy's log (`--log-file`, ours alone) says its language server listens on.

    Read incrementally from where the last read stopped, so each look costs only what agy
    appended; this replaces scanning the process tree's sockets whenever agy logs the line.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._tail = b""
        self.urls: list[str] = []

    def read(self) -> list[str]:
        """Every URL logged so far, plain HTTP first (no TLS handshake to pay for)."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(_LOG_READ_LIMIT)
        except OSError:
            return self.urls
        self._offset += len(data)
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()[-_LOG_READ_LIMIT:]
        for line in lines:
            match = _LISTENING.search(line)
            if match and 0 < int(match.group(1)) < 65536:
                url = f"{match.group(2).decode().lower()}://127.0.0.1:{int(match.group(1))}"
                if url not in self.urls:
                    self.urls.append(url)
        self.urls.sort(key=lambda url: url.startswith("https"))
        return self.urls


async def connect_to_language_server(
    tree: Callable[[], Awaitable[list[psutil.Process]]],
    *,
    csrf_token: str,
    exited: Callable[[], bool],
    timeout: float,
    log_file: str = "",
) -> ConnectClient:
    """Wait (bounded) until our agy's server answers Heartbeat; return its client.

    Where agy's server is: the ports our agy's own log names (`log_file`), else the loopback
    LISTEN sockets of our agy's process tree — a scan that backs off, since on a busy machine
    with many turns it is the costliest thing a turn does. Raises `TurnError` when agy exits or
    `timeout` passes first, `RpcError` for a CSRF refusal.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    logged = LogPorts(log_file) if log_file else None
    tried: set[str] = set()
    scan_every = _RETRY
    # With a log of its own, agy names its ports there as its server starts: the costly tree
    # scan is only the fallback for an agy that does not.
    next_scan = loop.time() + (_LOG_GRACE if logged is not None else 0.0)
    log_every = _RETRY  # look often at first, then back off
    next_log_read = loop.time()
    pause = _RETRY
    candidates = _Candidates(csrf_token)
    client: ConnectClient | None = None
    try:
        while True:
            urls: list[str] = logged.urls if logged is not None else []
            if logged is not None and not urls and loop.time() >= next_log_read:
                urls = await off_loop(logged.read)
                log_every = min(log_every * 2, _SCAN_MAX / 2)
                next_log_read = loop.time() + log_every
            if urls:
                # Schemes known: plain HTTP first, TLS only if that does not answer.
                plain = [u for u in urls if u.startswith("http:")]
                client = await candidates.probe(plain) if plain else None
                if client is None:
                    client = await candidates.probe(
                        [u for u in urls if u.startswith("https:")]
                    )
            elif loop.time() >= next_scan:
                # Scanning sockets of a process tree can take a while on a busy machine: off the loop.
                ports = await off_loop(listening_ports, await tree())
                scan_every = min(scan_every * 2, _SCAN_MAX)
                next_scan = loop.time() + scan_every
                urls = [f"{scheme}://127.0.0.1:{p}" for p in ports for scheme in ("https", "http")]
                client = await candidates.probe(urls) if urls else None
            if client is not None:
                return client
            tried.update(urls)
            if exited():
                raise TurnError("agy exited before its language server answered")
            if loop.time() >= deadline:
                seen = ", ".join(map(str, sorted(tried))) or "none"
                raise TurnError(
                    f"agy's language server did not answer within {timeout:.0f}s (tried: {seen})"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_MAX)  # many turns probing at once: fewer, later tries
    finally:
        # The winner goes on serving the turn; every other candidate's client is closed.
        await candidates.aclose(keep=client)


async def prove_ownership(
    client: ConnectClient,
    conversation_id: str,
    *,
    exited: Callable[[], bool] = lambda: False,
    timeout: float = 5.0,
    moved: Callable[[float], Awaitable[bool]] | None = None,
) -> None:
    """`GetConversationMetadata` must echo the id as `rootConversationId`; else `TurnError`.

    A server that does not know the conversation *yet* (its database can appear a moment before
    the server registers it; agy loading a resumed one answers `trajectory not found`) is asked
    again until `timeout` or agy's exit. `moved(seconds)`: a wait for the conversation's database
    to change (True when it did), given where one can be had: the server is then also asked at
    once when the database moves, and past `timeout` only then, for as long as agy runs — agy
    writes a conversation only once it has loaded it, so a short turn after a long load is not
    missed between two tries.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = _RETRY
    while True:
        try:
            answer = await client.call(
                "GetConversationMetadata", {"conversationId": conversation_id}
            )
            break
        except RpcError as exc:
            late = loop.time() >= deadline and moved is None
            if "not found" not in exc.message or exited() or late:
                raise _not_hosted(conversation_id, exc) from exc
            failure = exc
        if moved is None:
            await asyncio.sleep(pause)
        else:
            while not await moved(pause) and loop.time() >= deadline:
                if exited():  # agy is gone without writing: nothing more will move
                    raise _not_hosted(conversation_id, failure) from failure
        pause = min(pause * 2, _RETRY_MAX)
    metadata = answer.get("metadata")
    root = metadata.get("rootConversationId") if isinstance(metadata, dict) else None
    if root != conversation_id:
        raise TurnError(
            f"the language server answered for conversation {root!r}, not {conversation_id}"
        )


def _not_hosted(conversation_id: str, exc: RpcError) -> TurnError:
    return TurnError(
        f"the language server does not host conversation {conversation_id}: {exc.message}"
    )
