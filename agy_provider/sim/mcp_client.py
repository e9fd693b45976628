"""agy-sim's MCP client: the servers agy reads from its `--add-dir` roots, one tool call, its step.

Owns reading `<root>/.agents/mcp_config.json` (AGY-FORMATS §2), calling a tool over Streamable HTTP
with the official `mcp` SDK's client — as agy's client does: the initialize handshake, then
`MCP-Protocol-Version: 2026-07-28` on every request — in a thread of its own that the engine can
cancel, and the MCP tool step agy writes for the call: type 38, field 47 {1 server name, 2 the
call, 3 the result}. The SDK is imported only when a scenario calls an MCP tool.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import threading
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agy_provider.sim import descriptors as pb
from agy_provider.sim.payloads import StepFactory
from agy_provider.sim.scenario import McpCallSpec

__all__ = [
    "AGY_PROTOCOL_VERSION",
    "McpOutcome",
    "McpServer",
    "McpToolRun",
    "choose_server",
    "finish_mcp_tool_step",
    "mcp_tool_step",
    "read_mcp_servers",
]

CONFIG_FILE = Path(".agents") / "mcp_config.json"
# The version agy's MCP client sends after negotiating (AGY-FORMATS §2).
AGY_PROTOCOL_VERSION = "2026-07-28"
# A config file bigger than this is not an MCP config: refuse it rather than read it all.
MAX_CONFIG_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class McpServer:
    """One Streamable HTTP server from a config: its name there, URL and request headers."""

    name: str
    url: str
    headers: Mapping[str, str]
    config: str


@dataclasses.dataclass(frozen=True, slots=True)
class McpOutcome:
    """What a call produced: the result's text for the model, and whether it is an error."""

    text: str
    is_error: bool = False


def read_mcp_servers(roots: Sequence[str]) -> tuple[list[McpServer], list[str]]:
    """The HTTP servers named in each root's `.agents/mcp_config.json`, and what was skipped why.

    A name already found in an earlier root keeps its first entry; stdio servers (`command`)
    are not simulated.
    """
    servers: dict[str, McpServer] = {}
    problems: list[str] = []
    for root in roots:
        path = Path(root) / CONFIG_FILE
        try:
            if not path.is_file():
                continue
            if path.stat().st_size > MAX_CONFIG_BYTES:
                problems.append(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
                continue
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        entries = document.get("mcpServers") if isinstance(document, dict) else None
        if not isinstance(entries, dict):
            problems.append(f"{path}: no mcpServers object")
            continue
        for name, entry in entries.items():
            if not isinstance(entry, dict):
                problems.append(f"{path}: server {name!r} is not an object")
            elif "serverUrl" not in entry:
                problems.append(f"{path}: server {name!r} is not an HTTP server (serverUrl)")
            elif name not in servers:
                headers = entry.get("headers") or {}
                if not isinstance(entry["serverUrl"], str) or not isinstance(headers, dict):
                    problems.append(f"{path}: server {name!r} has a bad serverUrl or headers")
                    continue
                servers[name] = McpServer(
                    name,
                    entry["serverUrl"],
                    {str(k): str(v) for k, v in headers.items()},
                    str(path),
                )
    return list(servers.values()), problems


def choose_server(servers: Sequence[McpServer], name: str) -> McpServer | None:
    """The server called `name`, or the first one when `name` is empty."""
    if not name:
        return servers[0] if servers else None
    return next((s for s in servers if s.name == name), None)


class McpToolRun:
    """One `tools/call` on its own thread and event loop; `cancel()` works from any thread.

    `on_done` is called (on that thread) once `outcome` is set.
    """

    def __init__(self, server: McpServer, spec: McpCallSpec, on_done: Callable[[], None]) -> None:
        self.server = server
        self.spec = spec
        self.outcome: McpOutcome | None = None
        self._on_done = on_done
        self._lock = threading.Lock()
        self._cancelled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[McpOutcome] | None = None
        self._thread = threading.Thread(target=self._run, name="agy-sim-mcp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)

    def _run(self) -> None:
        try:
            self.outcome = asyncio.run(self._main())
        except BaseException as exc:  # the thread must always report
            self.outcome = McpOutcome(f"MCP call failed: {type(exc).__name__}: {exc}", True)
        finally:
            self._on_done()

    async def _main(self) -> McpOutcome:
        with self._lock:
            if self._cancelled:
                return McpOutcome("MCP call canceled", True)
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.ensure_future(self._call())
        try:
            return await self._task
        except asyncio.CancelledError:
            return McpOutcome("MCP call canceled", True)

    async def _call(self) -> McpOutcome:
        try:
            import httpx2
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
        except ImportError as exc:
            return McpOutcome(
                f"agy-sim needs the `mcp` package to call MCP tools ({exc}): "
                "it is one of agy-provider's dependencies: reinstall agy-provider",
                True,
            )

        async def agy_version(request: httpx2.Request) -> None:
            # agy negotiates with initialize, then names its own newer version on every request.
            if "mcp-protocol-version" in request.headers:
                request.headers["mcp-protocol-version"] = AGY_PROTOCOL_VERSION

        server, spec = self.server, self.spec
        http = httpx2.AsyncClient(
            trust_env=False,
            headers=dict(server.headers),
            timeout=httpx2.Timeout(30.0, read=None),  # a host may take its time; cancel bounds it
            event_hooks={"request": [agy_version]},
        )
        try:
            async with (
                http,
                Client(
                    streamable_http_client(server.url, http_client=http), mode="legacy"
                ) as client,
            ):
                listed = await client.list_tools()
                names = [tool.name for tool in listed.tools]
                if spec.tool not in names:
                    offered = ", ".join(names) or "none"
                    return McpOutcome(
                        f"MCP server {server.name!r} offers no tool {spec.tool!r} (offered: {offered})",
                        True,
                    )
                result = await client.call_tool(spec.tool, dict(spec.arguments))
        except Exception as exc:
            return McpOutcome(f"MCP server {server.name!r} failed: {_reason(exc)}", True)
        # agy's model sees a result's images; the simulator names each one in the text, so a
        # test can tell that the image arrived (its type and decoded size).
        parts = [
            block.text
            if block.type == "text"
            else f"[image {block.mime_type}, {len(base64.b64decode(block.data))} bytes]"
            for block in result.content
            if block.type in ("text", "image")
        ]
        return McpOutcome("\n".join(parts), bool(result.is_error))


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception the SDK's task groups may have wrapped."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def mcp_tool_step(factory: StepFactory, server: str, spec: McpCallSpec, call: Any) -> Any:
    """The PENDING MCP tool step: the model's call in metadata (5.4), the server's call at 47."""
    step = factory.base("CORTEX_STEP_TYPE_MCP_TOOL", "CORTEX_STEP_SOURCE_MODEL")
    meta = step.metadata
    meta.step_generation_version = 1
    meta.tool_call.CopyFrom(call)
    meta.arguments_order.extend(spec.arguments)
    meta.generator_model = pb.model_enum_number(factory.model.placeholder)
    meta.requested_model.model = meta.generator_model
    for field in ("viewable_at", "finished_generating_at", "last_completed_chunk_at"):
        factory.stamp(getattr(meta, field))
    body = step.mcp_tool
    body.server_name = server
    body.tool_call.id = call.id
    body.tool_call.name = spec.tool
    body.tool_call.arguments_json = json.dumps(
        dict(spec.arguments), separators=(",", ":"), ensure_ascii=False
    )
    body.server_info.name = server
    factory.move(step, "CORTEX_STEP_STATUS_PENDING")
    return step


def finish_mcp_tool_step(factory: StepFactory, step: Any, outcome: McpOutcome) -> None:
    """The result at 47.3; an error result ends the step ERROR with its text as the error."""
    step.mcp_tool.result_string = outcome.text
    if outcome.is_error:
        step.error.CopyFrom(factory.error_details(outcome.text, "MCP tool error", outcome.text))
        factory.move(step, "CORTEX_STEP_STATUS_ERROR")
    else:
        factory.move(step, "CORTEX_STEP_STATUS_DONE")
    factory.stamp(step.metadata.completed_at)
