"""The host tools of one live turn: offered to agy through the MCP bridge, parked until the host
answers (pi's tool-use loop), or run at once through the plugin hooks.

Owns `TurnTools` (what a turn offers, the bridge's life, the calls handed to the host as pi
`ToolCall`s and their answers from the host's `ToolResultMessage`s) and `ParkedTurns`, the
in-process registry by which a host's next `stream_simple` finds the turn its tool results belong
to. Importing `agy_provider.bridge.mcp_bridge` loads the MCP SDK (~1–2 s the first time), so
`TurnTools.start` imports it in a worker thread, and only for a turn that offers tools.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import json
import logging
import threading
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from agy_provider.errors import SourceError
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage
from agy_provider.workers import off_loop

if TYPE_CHECKING:
    import pluggy

    from agy_provider.bridge.mcp_bridge import HostToolBridge
    from agy_provider.bridge.parked_calls import ParkedToolCalls
    from agy_provider.contract.host_tools import HostTool
    from agy_provider.contract.host_tools import HostToolCall
    from agy_provider.contract.host_tools import HostToolResult
    from agy_provider.contract.parked import ParkedTurn
    from agy_provider.contract.turn import TurnContext

__all__ = [
    "ParkedTurns",
    "ToolExecutor",
    "TurnTools",
    "plugin_tools_registered",
    "result_images",
    "result_text",
    "tools_signature",
]

# Runs one of the host's tools at once (instead of handing the call back to the host's tool
# loop): given the call, returns the result's text, or raises; a plain function runs in a worker
# thread, a coroutine function on the loop.
ToolExecutor = Callable[[ToolCall], "str | Awaitable[str]"]

log = logging.getLogger(__name__)

# The bridge's MCP server name: agy names a step of its tool `<server>/<tool>` (AGY-FORMATS §3.5).
SERVER_NAME = "host"


def plugin_tools_registered(pm: pluggy.PluginManager) -> bool:
    """True when some plugin implements `register_host_tools` (without loading the MCP SDK)."""
    return bool(pm.hook.register_host_tools.get_hookimpls())


def result_text(message: ToolResultMessage) -> str:
    """A tool result's text as agy's model reads it (its images go beside it, `result_images`)."""
    return "\n".join(block.text for block in message.content if isinstance(block, TextContent))


def result_images(message: ToolResultMessage) -> tuple[tuple[str, str], ...]:
    """A tool result's images as MCP image content takes them: (mime type, base64 data)."""
    return tuple(
        (block.mime_type, block.data)
        for block in message.content
        if isinstance(block, ImageContent)
    )


class TurnTools:
    """The tools one turn offers agy, and the calls agy makes to them.

    `host_tools` (the host's `context.tools`) are run by the host: each call agy makes is parked
    and handed out by `next_calls()` as pi `ToolCall`s (ids are the bridge's, unique per
    process); `answer()` gives agy the host's results. With an `executor` they run at once
    instead, and their runs show as agy's own. Plugins' tools run at once through the
    `invoke_host_tool` hook. A plugin tool with the name of a host tool is left out (the host's
    wins; logged).
    """

    def __init__(
        self,
        host_tools: Sequence[Tool],
        *,
        turn: TurnContext,
        with_plugins: bool,
        executor: ToolExecutor | None = None,
    ) -> None:
        self._host_tools = list(host_tools)
        self._turn = turn
        self._with_plugins = with_plugins
        self._executor = executor
        self._plugin_names: frozenset[str] = frozenset()
        self._bridge: HostToolBridge | None = None  # the turn's own bridge, when it has one
        self._calls_from: Any = None  # the bridge agy's calls come through (its open calls)
        self.offered: list[HostTool | Tool] = []  # what the turn offers agy (once prepared)
        self._parked: ParkedToolCalls | None = None  # once started
        self._handed_out: set[str] = set()
        self._run_plugin_tool: Callable[[HostToolCall], Awaitable[HostToolResult]] | None = None

    @property
    def config_dir(self) -> str:
        """The folder to pass to agy as an extra `--add-dir` (once started)."""
        assert self._bridge is not None, "start() first"
        return self._bridge.config_dir

    @property
    def host_step_names(self) -> frozenset[str]:
        """How agy names the steps of tools the host's own tool loop runs (`host/<tool>`)."""
        if self._executor is not None:
            return frozenset()
        return frozenset(f"{SERVER_NAME}/{tool.name}" for tool in self._host_tools)

    async def start(self) -> TurnTools:
        """Load the SDK (off the loop), start the turn's own bridge. Raises `UsageError` for bad
        tools and `SourceError` when the bridge cannot listen."""
        await self.prepare()
        await self.serve_alone()
        return self

    async def serve_alone(self) -> str:
        """Start the turn's own bridge for what `prepare` gathered; the folder to give agy as one
        more `--add-dir`. Raises `SourceError` when the bridge cannot listen."""
        mcp_bridge = await off_loop(_load_bridge)
        bridge = mcp_bridge.HostToolBridge(self.offered, self.handle, server_name=SERVER_NAME)
        self._bridge = self._calls_from = await bridge.start()
        return self.config_dir

    def serve_from(self, bridge: Any) -> None:
        """agy's calls come through a bridge that is not the turn's (a warm agy's, which lives as
        long as agy and relays each call to `handle`): its open calls are what `running` sees."""
        self._calls_from = bridge

    async def prepare(self) -> list[HostTool | Tool]:
        """Load the SDK (off the loop) and gather what the turn offers (`offered`), ready to
        park agy's calls; no bridge yet. Raises `UsageError` for bad tools."""
        mcp_bridge = await off_loop(_load_bridge)
        offered: list[HostTool | Tool] = list(self._host_tools)
        if self._with_plugins:
            taken = {tool.name for tool in self._host_tools}
            plugin_tools = await off_loop(mcp_bridge.plugin_host_tools)
            for tool in plugin_tools:
                if tool.name in taken:
                    log.warning(
                        "host tool %r is offered by the host and by a plugin; the host's is used",
                        tool.name,
                    )
                    continue
                offered.append(tool)
            self._plugin_names = frozenset(t.name for t in plugin_tools if t.name not in taken)
            self._run_plugin_tool = mcp_bridge.plugin_tool_handler(self._turn)
        self._parked = mcp_bridge.ParkedToolCalls()
        self.offered = offered
        return offered

    async def handle(self, call: HostToolCall) -> HostToolResult | str:
        """One call agy made: a plugin's tool or the executor at once, else parked for the host."""
        if call.name in self._plugin_names and self._run_plugin_tool is not None:
            return await self._run_plugin_tool(call)
        if self._executor is not None:
            return await self._execute(call)
        assert self._parked is not None
        result: HostToolResult = await self._parked.handle(call)
        return result

    async def _execute(self, call: HostToolCall) -> HostToolResult | str:
        """The host's executor on one call; what it raises is the model's error result (the
        bridge turns an exception into one, naming the tool)."""
        assert self._executor is not None
        pi_call = ToolCall(id=call.id, name=call.name, arguments=dict(call.arguments))
        if inspect.iscoroutinefunction(self._executor):
            answer = await self._executor(pi_call)
        else:
            answer = await off_loop(self._executor, pi_call)
            if inspect.isawaitable(answer):
                answer = await answer
        if not isinstance(answer, str):
            raise TypeError(
                f"the tool executor returned {type(answer).__name__} for {call.name!r}; "
                "return the result's text (str), or raise for an error"
            )
        return answer

    async def next_calls(self) -> list[ToolCall]:
        """Wait for agy's next call to a host tool; return it with every other call agy has
        made meanwhile that the host has not been given yet (oldest first)."""
        assert self._parked is not None
        first = await self._parked.next_call()
        calls = [first, *(c for c in self._parked.pending if c.id != first.id)]
        fresh = [c for c in calls if c.id not in self._handed_out]
        self._handed_out.update(c.id for c in fresh)
        return [ToolCall(id=c.id, name=c.name, arguments=dict(c.arguments)) for c in fresh]

    @property
    def running(self) -> bool:
        """True while a call agy made is being run at once (an executor's or a plugin's tool)."""
        if self._calls_from is None:
            return False
        waiting = set() if self._parked is None else {c.id for c in self._parked.pending}
        return any(c.id not in waiting for c in self._calls_from.pending_calls)

    @property
    def waiting_ids(self) -> frozenset[str]:
        """Calls handed to the host and still unanswered."""
        if self._parked is None:
            return frozenset()
        return frozenset(c.id for c in self._parked.pending if c.id in self._handed_out)

    def answer(self, results: Mapping[str, ToolResultMessage]) -> None:
        """Give agy the host's results; a waiting call the host did not answer gets an error."""
        from agy_provider.contract.host_tools import HostToolResult

        assert self._parked is not None
        for call_id in sorted(self.waiting_ids):
            message = results.get(call_id)
            if message is None:
                result = HostToolResult("the host returned no result for this call", True)
            else:
                result = HostToolResult(
                    result_text(message), message.is_error, result_images(message)
                )
            if not self._parked.resolve(call_id, result):
                log.info("host tool call %s was no longer open when the host answered", call_id)

    async def aclose(self) -> None:
        """Stop the turn's bridge: calls still open are answered with an error, the folder goes.
        Through a warm agy's bridge (which stays), the calls still parked get that error."""
        if self._bridge is not None:
            await self._bridge.aclose()
        elif self._parked is not None:
            from agy_provider.contract.host_tools import HostToolResult

            for call in self._parked.pending:
                self._parked.resolve(call.id, HostToolResult("the turn ended first", True))


def tools_signature(offered: Sequence[HostTool | Tool]) -> str:
    """What agy is offered, as one value (names, descriptions, schemas): a warm agy serves one."""
    described = sorted(
        (t.name, t.description, json.dumps(t.parameters, sort_keys=True, default=str))
        for t in offered
    )
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:32]


def _load_bridge() -> Any:
    try:
        from agy_provider.bridge import mcp_bridge
    except ImportError as exc:  # a broken install: the MCP SDK is one of our dependencies
        raise SourceError(
            f"host tools need the MCP SDK, which did not import ({exc}); reinstall agy-provider "
            "(`pip install --force-reinstall agy-provider`) or `pip install 'mcp>=2.3,<3'`"
        ) from exc
    return mcp_bridge


# Put between a tool result and the user message that followed it, when both go to agy as the
# result of its call (`ParkedTurns.find`).
FOLLOWING_USER_MESSAGE = "[the user's message that followed this tool result:]"


def trailing_results(
    messages: Sequence[object],
) -> tuple[list[ToolResultMessage], UserMessage | None]:
    """The tool results that end `messages` (in order), and the one user message after them
    when there is one (else None); no results: ([], None)."""
    end = len(messages)
    after = None
    if end and isinstance(messages[-1], UserMessage):
        after = messages[-1]
        end -= 1
    start = end
    while start and isinstance(messages[start - 1], ToolResultMessage):
        start -= 1
    found = [m for m in messages[start:end] if isinstance(m, ToolResultMessage)]
    return (found, after) if found else ([], None)


class ParkedTurns:
    """Turns waiting for the host's tool results, by the ids of the calls they handed out.

    Lives on one event loop; a host's `stream_simple` whose context ends in tool results looks
    its turn up here (`find`) before anything else.
    """

    def __init__(self) -> None:
        self._by_call: dict[str, ParkedTurn] = {}
        # Calls whose results already resumed a turn that still runs: a second host bringing the
        # same results is told so, instead of starting agy on the same work again.
        self._answered: dict[str, ParkedTurn] = {}
        # Turns run on several loops at once (the sync API gives each a thread of its own).
        self._lock = threading.Lock()
        # Loops whose turns are being waited for (`wait_for_turns`): a turn parking there ends.
        self.stopping: set[asyncio.AbstractEventLoop] = set()

    def park(self, call_ids: Iterable[str], turn: ParkedTurn) -> None:
        with self._lock:
            for call_id in call_ids:
                self._by_call[call_id] = turn

    def release(self, turn: ParkedTurn) -> None:
        """Forget every call of `turn` (it resumed or ended)."""
        with self._lock:
            for call_id in [k for k, v in self._by_call.items() if v is turn]:
                del self._by_call[call_id]

    def answered(self, call_ids: Iterable[str], turn: ParkedTurn) -> None:
        """`turn` resumed with the results of `call_ids` (remembered until it ends)."""
        with self._lock:
            for call_id in call_ids:
                self._answered[call_id] = turn

    def forget(self, turn: ParkedTurn) -> None:
        """`turn` has ended: forget its calls, waiting and answered alike."""
        self.release(turn)
        with self._lock:
            for call_id in [k for k, v in self._answered.items() if v is turn]:
                del self._answered[call_id]

    def resumed_by_another(self, messages: Sequence[object]) -> bool:
        """True when the trailing tool results of `messages` already resumed a running turn."""
        ids = {m.tool_call_id for m in trailing_results(messages)[0]}
        with self._lock:
            return bool(ids) and ids <= self._answered.keys()

    def find(
        self, messages: Sequence[object], session_id: str = ""
    ) -> tuple[ParkedTurn, dict[str, ToolResultMessage]] | None:
        """The parked turn the trailing tool results of `messages` answer, with those results.

        Only its owner resumes it: the turn must have been started with the same `session_id`
        ("" for none). A user message after the results (pi sends one when a tool result
        carries images the API cannot put in a tool message, or after abandoning a call) goes
        with them: its content is appended to the last result, which agy reads in that order.
        """
        found, after = trailing_results(messages)
        if not found:
            return None
        with self._lock:
            turns = {
                id(t): t for k, t in self._by_call.items() if k in {m.tool_call_id for m in found}
            }
        if len(turns) != 1:
            return None
        (turn,) = turns.values()
        if turn.session_id != (session_id or ""):
            return None
        results: dict[str, ToolResultMessage] = {}
        for message in found:
            results.setdefault(message.tool_call_id, message)
        if after is not None:
            last = found[-1]
            content = after.content
            added = [TextContent(text=content)] if isinstance(content, str) else list(content)
            results[last.tool_call_id] = dataclasses.replace(
                results[last.tool_call_id],
                content=(
                    *results[last.tool_call_id].content,
                    TextContent(text=FOLLOWING_USER_MESSAGE),
                    *added,
                ),
            )
        return turn, results

    def of_session(self, session_id: str) -> list[ParkedTurn]:
        """Parked turns of `session_id` (a new turn of that session ends them first)."""
        if not session_id:
            return []
        with self._lock:
            found = {id(t): t for t in self._by_call.values() if t.session_id == session_id}
        return list(found.values())

    def all(self) -> list[ParkedTurn]:
        with self._lock:
            return list({id(t): t for t in self._by_call.values()}.values())
