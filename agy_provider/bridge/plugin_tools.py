"""The host tools of plugins: those the `register_host_tools` hook registers, and a handler
that answers their calls through the `invoke_host_tool` hook.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from agy_provider.contract.host_tools import HostTool
from agy_provider.contract.host_tools import HostToolCall
from agy_provider.contract.host_tools import HostToolHandler
from agy_provider.contract.host_tools import HostToolResult
from agy_provider.contract.host_tools import as_result
from agy_provider.errors import UsageError

if TYPE_CHECKING:
    from agy_provider.contract.turn import TurnContext

__all__ = ["plugin_host_tools", "plugin_tool_handler"]


def plugin_host_tools() -> list[HostTool]:
    """The host tools plugins register (`register_host_tools`); a name registered twice is an error."""
    from agy_provider.plugin_manager import get_plugin_manager

    pm = get_plugin_manager()
    found: dict[str, tuple[HostTool, str]] = {}
    for impl in pm.hook.register_host_tools.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(
            name: str,
            description: str = "",
            parameters: Mapping[str, Any] | None = None,
            _plugin: str = plugin_name,
        ) -> None:
            if not isinstance(name, str) or not name:
                raise UsageError(f"plugin {_plugin} registered a host tool without a name")
            if name in found:
                raise UsageError(
                    f"host tool {name!r} registered twice ({found[name][1]} and {_plugin})"
                )
            found[name] = (HostTool(name, description, dict(parameters or {})), _plugin)

        impl.function(register=register)
    return [tool for tool, _ in found.values()]


def plugin_tool_handler(turn: TurnContext) -> HostToolHandler:
    """A handler that runs each call through the `invoke_host_tool` hook (in a worker thread).

    A str or `HostToolResult` answer is passed on; any other value is sent as JSON; None (no
    plugin runs that tool) is an error result.
    """
    from agy_provider.plugin_manager import get_plugin_manager

    async def handle(call: HostToolCall) -> HostToolResult:
        pm = get_plugin_manager()
        value = await asyncio.to_thread(
            pm.hook.invoke_host_tool, name=call.name, arguments=dict(call.arguments), turn=turn
        )
        if value is None:
            return HostToolResult(f"no plugin runs the host tool {call.name!r}", True)
        if isinstance(value, HostToolResult | str):
            return as_result(value, call.name)
        return HostToolResult(json.dumps(value, ensure_ascii=False, default=str))

    return handle
