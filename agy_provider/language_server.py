"""Find our agy's language server: its loopback LISTEN ports, the Connect one, and proof it hosts us.

Only our child's process tree is searched, so another agy's server is never bound (AGY-FORMATS §4.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable

import psutil

from agy_provider.errors import RpcError, TurnError
from agy_provider.rpc_client import PROBE_TIMEOUT, ConnectClient

__all__ = ["connect_to_language_server", "listening_ports", "prove_ownership"]

log = logging.getLogger(__name__)

# How long to wait for the server to answer between polls of the process tree.
_RETRY = 0.05


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


async def _heartbeat(base_url: str, csrf_token: str) -> ConnectClient | None:
    client = ConnectClient(base_url, csrf_token=csrf_token)
    try:
        await client.call("Heartbeat", {}, timeout=PROBE_TIMEOUT)
    except RpcError as exc:
        await client.aclose()
        if exc.status == 401:
            raise  # a CSRF refusal is its own error, not "no server here"
        return None
    return client


async def _probe(ports: list[int], csrf_token: str) -> ConnectClient | None:
    """The first (port, scheme) that answers Heartbeat, all tried at once.

    Never assume which port is HTTPS: a TLS hello sent to the plain port can hang until its
    timeout, so every candidate runs concurrently and the first answer wins.
    """
    urls = [f"{scheme}://127.0.0.1:{port}" for port in ports for scheme in ("https", "http")]
    tasks = [asyncio.create_task(_heartbeat(url, csrf_token)) for url in urls]
    winner: ConnectClient | None = None
    try:
        for finished in asyncio.as_completed(tasks):
            client = await finished
            if client is not None:
                winner = client
                break
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                other = await task
                if other is not None and other is not winner:
                    await other.aclose()
    return winner


async def connect_to_language_server(
    tree: Callable[[], Awaitable[list[psutil.Process]]],
    *,
    csrf_token: str,
    exited: Callable[[], bool],
    timeout: float,
) -> ConnectClient:
    """Wait (bounded) until our agy's tree listens and a port answers Heartbeat; return its client.

    Raises `TurnError` when agy exits or `timeout` passes first, `RpcError` for a CSRF refusal.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    tried: set[int] = set()
    while True:
        # Scanning sockets of a process tree can take a while on a busy machine: off the loop.
        ports = await asyncio.to_thread(listening_ports, await tree())
        if ports:
            client = await _probe(ports, csrf_token)
            if client is not None:
                return client
            tried.update(ports)
        if exited():
            raise TurnError("agy exited before its language server answered")
        if loop.time() >= deadline:
            seen = ", ".join(map(str, sorted(tried))) or "none"
            raise TurnError(
                f"agy's language server did not answer within {timeout:.0f}s "
                f"(loopback ports tried: {seen})"
            )
        await asyncio.sleep(_RETRY)


async def prove_ownership(
    client: ConnectClient,
    conversation_id: str,
    *,
    exited: Callable[[], bool] = lambda: False,
    timeout: float = 5.0,
) -> None:
    """`GetConversationMetadata` must echo the id as `rootConversationId`; else `TurnError`.

    A server that does not know the conversation *yet* (its database can appear a moment before
    the server registers it) is asked again until `timeout` or agy's exit.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            answer = await client.call(
                "GetConversationMetadata", {"conversationId": conversation_id}
            )
            break
        except RpcError as exc:
            if "not found" not in exc.message or exited() or loop.time() >= deadline:
                raise TurnError(
                    f"the language server does not host conversation {conversation_id}: "
                    f"{exc.message}"
                ) from exc
        await asyncio.sleep(_RETRY)
    root = (answer.get("metadata") or {}).get("rootConversationId")
    if root != conversation_id:
        raise TurnError(
            f"the language server answered for conversation {root!r}, not {conversation_id}"
        )
