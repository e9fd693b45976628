"""The MCP bridge of one warm agy: the host's tools served for as long as that agy lives (agy
reads its MCP servers once, when it starts), each call relayed to the turn that holds agy now.

Warm agys outlive the loops of their turns, so their bridges run on one event loop of their own,
in a daemon thread started with the first; a call runs the holding turn's `TurnTools.handle` on
that turn's loop, and a call nobody holds is answered with an error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["WarmBridge"]

log = logging.getLogger("agy_provider.live.warm")

# Starting and stopping a bridge (a port, a folder; the SDK's import the first time) waits at most
# this long, in the thread that starts or ends its agy.
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 5.0

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _bridge_loop() -> asyncio.AbstractEventLoop:
    """The event loop every warm agy's bridge runs on (started once, in a daemon thread)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="agy-provider-warm-bridges", daemon=True
            ).start()
            _loop = loop
        return _loop


class WarmBridge:
    """One warm agy's host tools over MCP (`bridge/mcp_bridge.HostToolBridge`), on the bridges'
    loop; `relay_to` names the turn (its `TurnTools` and loop) whose calls these are now."""

    def __init__(self, offered: Sequence[Any]) -> None:
        self.offered = list(offered)
        self._bridge: Any = None
        self._target: tuple[Any, asyncio.AbstractEventLoop] | None = None
        self._lock = threading.Lock()

    def start(self) -> str:
        """Start serving (blocking: call it off any loop but the bridges'); the folder to give
        agy as one more `--add-dir`. Raises what the bridge raises (`SourceError`, `UsageError`)."""
        from agy_provider.bridge.host_tools import SERVER_NAME
        from agy_provider.bridge.mcp_bridge import HostToolBridge

        loop = _bridge_loop()

        async def start() -> Any:
            return await HostToolBridge(self.offered, self._relay, server_name=SERVER_NAME).start()

        self._bridge = asyncio.run_coroutine_threadsafe(start(), loop).result(_START_TIMEOUT)
        return str(self._bridge.config_dir)

    @property
    def pending_calls(self) -> tuple[Any, ...]:
        """agy's calls not answered yet (what a turn's `running` looks at)."""
        return self._bridge.pending_calls if self._bridge is not None else ()

    def relay_to(self, tools: Any, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._target = (tools, loop)

    def stop_relaying(self, tools: Any) -> None:
        with self._lock:
            if self._target is not None and self._target[0] is tools:
                self._target = None

    async def _relay(self, call: Any) -> Any:
        """On the bridges' loop: the call run by the holding turn's tools, on that turn's loop;
        cancelled (agy dropped the call) → cancelled there too."""
        from agy_provider.contract.host_tools import HostToolResult

        with self._lock:
            target = self._target
        if target is None:
            return HostToolResult("no turn is running in agy-provider to answer this call", True)
        tools, loop = target
        try:
            running = asyncio.run_coroutine_threadsafe(tools.handle(call), loop)
        except RuntimeError:  # the turn's loop is gone
            return HostToolResult("the turn that offered this tool has ended", True)
        return await asyncio.wrap_future(running)

    def close(self) -> None:
        """Stop serving: open calls are answered with an error, the folder goes (blocking)."""
        bridge, self._bridge = self._bridge, None
        if bridge is None or _loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(bridge.aclose(), _loop).result(_STOP_TIMEOUT)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.info("a warm agy's tool bridge did not stop cleanly: %s", exc)
