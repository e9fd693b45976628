"""The MCP bridge: a host's tools offered to agy over MCP Streamable HTTP for the length of a turn.

Owns `HostToolBridge` (a loopback MCP server on the official `mcp` SDK behind a per-turn token, a
body cap and the private `.agents/mcp_config.json` folder agy reads through `--add-dir`), and
re-exports what its users need beside it (the host-tool values come from `contract/host_tools`):
`ParkedToolCalls` (`parked_calls`), the plugins' tools (`plugin_tools`) and `sweep_stale_folders`
(`bridge_folders`).

Every `tools/call` agy makes is handed to one async callback; the callback may take as long as the
host needs (a parked call waits for the host's next `stream_simple`), and closing the bridge
answers every call still open with an error result, cancels its callback, stops the server and
removes the folder. Importing this module loads the SDK (pydantic, starlette, uvicorn): do it off
the event loop (in a worker thread) when it matters.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import secrets
import socket
import tempfile
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Imported with this module, so that starting a bridge on the event loop imports nothing: the
# SDK's first anyio call would import anyio's asyncio backend (tens of ms), and uvicorn its
# lifespan class.
import anyio._backends._asyncio  # noqa: F401
import jsonschema  # type: ignore[import-untyped]
import mcp_types
import uvicorn
import uvicorn.lifespan.off
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import ClientDisconnect
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from agy_provider import lifeline
from agy_provider.bridge.bridge_folders import make_bridge_folder
from agy_provider.bridge.bridge_folders import remove_folder as _remove_folder
from agy_provider.bridge.bridge_folders import sweep_stale_folders
from agy_provider.bridge.mcp_requests import handshake_era
from agy_provider.bridge.mcp_requests import respond_error
from agy_provider.bridge.parked_calls import ParkedToolCalls
from agy_provider.bridge.plugin_tools import plugin_host_tools
from agy_provider.bridge.plugin_tools import plugin_tool_handler
from agy_provider.contract.host_tools import HostTool
from agy_provider.contract.host_tools import HostToolCall
from agy_provider.contract.host_tools import HostToolHandler
from agy_provider.contract.host_tools import HostToolResult
from agy_provider.contract.host_tools import as_host_tools
from agy_provider.contract.host_tools import as_result
from agy_provider.contract.host_tools import capped
from agy_provider.contract.host_tools import schema_of
from agy_provider.errors import SourceError
from agy_provider.errors import UsageError
from agy_provider.http_serving import listening_socket
from agy_provider.http_serving import read_body
from agy_provider.http_serving import replay_body
from agy_provider.pi.types import Tool
from agy_provider.store.atomic import write_json_atomic
from agy_provider.workers import off_loop

__all__ = [
    "CONFIG_RELATIVE_PATH",
    "DEFAULT_SERVER_NAME",
    "MAX_BODY_BYTES",
    "MCP_PATH",
    "TOKEN_HEADER",
    "HostToolBridge",
    "ParkedToolCalls",
    "plugin_host_tools",
    "plugin_tool_handler",
    "sweep_stale_folders",
]

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
# The header carrying the per-turn token; agy sends it from the config's "headers" (AGY-FORMATS §2).
TOKEN_HEADER = "X-Agy-Provider-Token"
DEFAULT_SERVER_NAME = "host"
# Where agy looks for MCP servers inside each `--add-dir` root.
CONFIG_RELATIVE_PATH = os.path.join(".agents", "mcp_config.json")
# A request body past this is refused (413) before it is read: a model's tool-call arguments are
# a few kilobytes and agy's other MCP requests carry less, so 1 MiB only stops runaways.
MAX_BODY_BYTES = 1024 * 1024
# Closing waits this long for answers to reach agy and connections to end, then stops regardless.
CLOSE_GRACE_SECONDS = 2.0

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOKEN_HEADER_KEY = TOKEN_HEADER.lower().encode("ascii")
# The key under which the ASGI scope of a POST carries its `_Post` (the SDK hands that scope's
# request to the tool handler as `ctx.request`).
_POST_SCOPE_KEY = "agy_provider.post"
_DROPPED_MESSAGE = "agy closed its request for this call before the host answered it"
_CLOSED_MESSAGE = (
    "agy-provider closed the host tool bridge before the host answered this call (the turn ended)"
)


def _mcp_result(result: HostToolResult) -> mcp_types.CallToolResult:
    content: list[mcp_types.TextContent | mcp_types.ImageContent] = [
        mcp_types.TextContent(text=result.text)
    ]
    content += (
        mcp_types.ImageContent(type="image", data=data, mime_type=mime)
        for mime, data in result.images
    )
    return mcp_types.CallToolResult(content=list(content), is_error=result.is_error)


class _Post:
    """One POST agy made: set `dropped` when its connection went away before the answer was sent.

    In a live (stateful) session the SDK runs a call's handler in the session's own task, beyond
    the request: without this, a call whose request agy dropped would wait for an answer that
    can no longer reach anyone. (The SDK resumes such a stream only from an event store, which
    the bridge has none of.)
    """

    __slots__ = ("dropped",)

    def __init__(self) -> None:
        self.dropped = asyncio.Event()


def _post_of(ctx: Any) -> _Post | None:
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    post = scope.get(_POST_SCOPE_KEY) if isinstance(scope, dict) else None
    return post if isinstance(post, _Post) else None


class _QuietH11Protocol(H11Protocol):
    """uvicorn's h11 protocol without access lines: uvicorn logs each request whenever its access
    logger has a handler anywhere up the tree (a host's root handler), whatever the config says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False


class HostToolBridge:
    """An MCP server on 127.0.0.1 offering the host's tools to one agy turn.

    `tools` are `HostTool`s or pi `Tool`s; `handler` is awaited once per `tools/call` (arguments
    checked against the tool's schema first) and may wait as long as the host needs. Use it as
    an async context manager (or `await start()` … `await aclose()`); while it runs,
    `config_dir` is the folder to pass to agy as one more `--add-dir` (it holds
    `.agents/mcp_config.json` naming this server, its URL and the token header). Every request
    must carry the token (403 otherwise); bodies over `max_body_bytes` get 413.

    Raises `UsageError` for bad tools or names (at construction) and `SourceError` when the
    server or its folder cannot be set up (at start).
    """

    def __init__(
        self,
        tools: Sequence[HostTool | Tool],
        handler: HostToolHandler,
        *,
        server_name: str = DEFAULT_SERVER_NAME,
        max_body_bytes: int = MAX_BODY_BYTES,
        parent_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not _SERVER_NAME.fullmatch(server_name):
            raise UsageError(
                f"MCP server name {server_name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if max_body_bytes <= 0:
            raise UsageError("max_body_bytes must be a positive number of bytes")
        self._tools = as_host_tools(tools)
        self._schemas = {name: schema_of(tool) for name, tool in self._tools.items()}
        self._validators = {
            name: jsonschema.validators.validator_for(schema)(schema)
            for name, schema in self._schemas.items()
        }
        self._handler = handler
        self.server_name = server_name
        self.max_body_bytes = max_body_bytes
        self._parent_dir = os.fspath(parent_dir) if parent_dir is not None else None
        self._token = secrets.token_urlsafe(32).encode("ascii")
        self._state = "new"
        self._port = 0
        self._config_dir: Path | None = None
        self._closing = asyncio.Event()
        self._stopped = asyncio.Event()
        self._calls: dict[str, HostToolCall] = {}
        self._posts = 0
        self._posts_idle = asyncio.Event()
        self._posts_idle.set()
        self._serve_task: asyncio.Task[None] | None = None
        self._manager: StreamableHTTPSessionManager | None = None

    def __repr__(self) -> str:  # never the token
        where = f"{self.url}" if self._port else "not started"
        return f"<HostToolBridge {self.server_name!r} {where} tools={list(self._tools)}>"

    # --- what the turn needs ---------------------------------------------------------------

    @property
    def tools(self) -> tuple[HostTool, ...]:
        return tuple(self._tools.values())

    @property
    def url(self) -> str:
        """The server's endpoint, `http://127.0.0.1:<port>/mcp` (once started)."""
        return f"http://127.0.0.1:{self._port}{MCP_PATH}"

    @property
    def config_dir(self) -> str:
        """The private folder to pass to agy as an extra `--add-dir` (once started)."""
        if self._config_dir is None:
            raise UsageError("the host tool bridge has no config folder: start it first")
        return str(self._config_dir)

    @property
    def pending_calls(self) -> tuple[HostToolCall, ...]:
        """Calls agy made that have no answer yet, oldest first."""
        return tuple(self._calls.values())

    def headers(self) -> dict[str, str]:
        """The headers a client needs on every request (the token); for tests and diagnostics."""
        return {TOKEN_HEADER: self._token.decode("ascii")}

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> HostToolBridge:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> HostToolBridge:
        """Listen on a free loopback port and write the config folder. Returns self."""
        if self._state != "new":
            raise UsageError("a HostToolBridge can be started once")
        self._state = "starting"
        try:
            sock = listening_socket("127.0.0.1", 0, 16)
            self._port = sock.getsockname()[1]
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._serve_task = asyncio.create_task(
                self._serve(sock, ready), name=f"mcp-bridge-{self._port}"
            )
            await ready
            writing = asyncio.ensure_future(off_loop(self._write_config))
            try:
                self._config_dir = await asyncio.shield(writing)
            except asyncio.CancelledError:
                # The thread writes the folder anyway: learn where, so that aclose removes it.
                with contextlib.suppress(Exception):
                    self._config_dir = await writing
                raise
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, OSError):
                raise SourceError(
                    f"the host tool bridge could not start: {exc}. Check that 127.0.0.1 accepts "
                    "connections and that the temporary folder is writable"
                ) from exc
            raise
        self._state = "running"
        log.info(
            "host tool bridge %r serving %d tool(s) at %s",
            self.server_name,
            len(self._tools),
            self.url,
        )
        return self

    async def aclose(self) -> None:
        """Answer open calls with an error (cancelling their callbacks), stop, remove the folder.

        Idempotent; safe from any task.
        """
        if self._state == "closed":
            return
        self._state = "closed"
        self._closing.set()
        task = self._serve_task
        if task is not None:
            self._stopped.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(task)
        folder, self._config_dir = self._config_dir, None
        if folder is not None:
            try:
                await off_loop(_remove_folder, folder)
            except RuntimeError:  # the program is ending (no new work for the pool): here, then
                _remove_folder(folder)

    async def _serve(self, sock: socket.socket, ready: asyncio.Future[None]) -> None:
        self._manager = manager = StreamableHTTPSessionManager(
            app=self._mcp_server(),
            session_idle_timeout=None,  # a session lives as long as the turn
            max_request_body_size=self.max_body_bytes,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
            ),
        )
        config = uvicorn.Config(
            self._asgi,
            http=_QuietH11Protocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,  # the host's logging is the host's
            log_level=None,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            timeout_graceful_shutdown=int(CLOSE_GRACE_SECONDS),
        )
        config.access_log = False  # set after __init__, which would otherwise mute uvicorn's logger
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        try:
            async with manager.run():
                await server.startup(sockets=[sock])
                ready.set_result(None)
                await self._stopped.wait()
                await self._let_answers_out()
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, asyncio.CancelledError):
                    ready.cancel()
                else:
                    ready.set_exception(exc)
            raise
        finally:
            if server.started:
                await server.shutdown(sockets=[sock])
            else:
                sock.close()

    async def _let_answers_out(self) -> None:
        """Closing: every open call has been answered with an error; wait until they are sent."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._posts_idle.wait(), CLOSE_GRACE_SECONDS)

    def _write_config(self) -> Path:
        parent = self._parent_dir or tempfile.gettempdir()
        folder = Path(make_bridge_folder(parent))
        # It holds the token: should this process die unannounced, the lifeline removes it.
        lifeline.keep_folder(str(folder))
        try:
            (folder / ".agents").mkdir(mode=0o700)
            config = {
                "mcpServers": {
                    self.server_name: {
                        "serverUrl": self.url,
                        "headers": {TOKEN_HEADER: self._token.decode("ascii")},
                    }
                }
            }
            write_json_atomic(folder / CONFIG_RELATIVE_PATH, config)
        except BaseException:
            _remove_folder(folder)
            raise
        return folder

    # --- MCP ---------------------------------------------------------------------------------

    def _mcp_server(self) -> Server[Any]:
        async def list_tools(
            ctx: Any, params: mcp_types.PaginatedRequestParams | None
        ) -> mcp_types.ListToolsResult:
            return mcp_types.ListToolsResult(
                tools=[
                    mcp_types.Tool(
                        name=tool.name,
                        description=tool.description,
                        input_schema=self._schemas[tool.name],
                    )
                    for tool in self._tools.values()
                ]
            )

        async def call_tool(
            ctx: Any, params: mcp_types.CallToolRequestParams
        ) -> mcp_types.CallToolResult:
            result = await self._call(params.name, params.arguments or {}, _post_of(ctx))
            return _mcp_result(await capped(result, params.name))

        return Server(
            "agy-provider host tools",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            get_tool_input_schema=self._schemas.get,
        )

    async def _call(
        self, name: str, arguments: Mapping[str, Any], post: _Post | None = None
    ) -> HostToolResult:
        tool = self._tools.get(name)
        if tool is None:
            offered = ", ".join(self._tools) or "none"
            return HostToolResult(f"unknown host tool {name!r} (offered: {offered})", True)
        problem = next(iter(self._validators[name].iter_errors(dict(arguments))), None)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "arguments"
            return HostToolResult(
                f"arguments for host tool {name!r} do not match its schema at {where}: "
                f"{problem.message}",
                True,
            )
        if self._closing.is_set():
            return HostToolResult(_CLOSED_MESSAGE, True)
        call = HostToolCall(f"mcp-{secrets.token_hex(8)}", name, dict(arguments))
        self._calls[call.id] = call
        answer = asyncio.ensure_future(self._run_handler(call))
        closing = asyncio.ensure_future(self._closing.wait())
        ends: set[asyncio.Future[Any]] = {answer, closing}
        if post is not None:
            ends.add(asyncio.ensure_future(post.dropped.wait()))
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                return answer.result()
            answer.cancel()
            await asyncio.wait({answer}, timeout=CLOSE_GRACE_SECONDS)
            if not self._closing.is_set():
                log.info("host tool call %s (%s) ended unanswered: agy dropped it", call.id, name)
                return HostToolResult(_DROPPED_MESSAGE, True)
            log.info("host tool call %s (%s) ended unanswered: the bridge closed", call.id, name)
            return HostToolResult(_CLOSED_MESSAGE, True)
        finally:
            # Also when agy went away (the request was cancelled): the callback learns it too.
            for end in ends - {answer}:
                end.cancel()
            if not answer.done():
                answer.cancel()
            self._calls.pop(call.id, None)

    async def _run_handler(self, call: HostToolCall) -> HostToolResult:
        try:
            return as_result(await self._handler(call), call.name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("host tool %s failed: %s: %s", call.name, type(exc).__name__, exc)
            return HostToolResult(
                f"host tool {call.name!r} failed: {type(exc).__name__}: {exc}", True
            )

    # --- HTTP in front of the SDK --------------------------------------------------------------

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        if not self._authorized(headers):
            log.info("host tool bridge refused a request without its token")
            await respond_error(send, 403, "forbidden: this MCP server serves one agy-provider turn")
            return
        if scope.get("path") != MCP_PATH:
            await respond_error(send, 404, f"not found: the MCP endpoint is {MCP_PATH}")
            return
        if self._closing.is_set():
            await respond_error(send, 503, "the host tool bridge is closing: the turn ended")
            return
        if scope.get("method") != "POST":
            await self._manager_request(handshake_era(scope, headers, None), receive, send)
            return
        body = await self._read_body(headers, receive, send)
        if body is None:
            return
        self._posts += 1
        self._posts_idle.clear()
        post = _Post()
        try:
            served = {**handshake_era(scope, headers, body), _POST_SCOPE_KEY: post}
            if not await self._manager_request(served, replay_body(body, receive), send):
                post.dropped.set()
        finally:
            self._posts -= 1
            if not self._posts:
                self._posts_idle.set()

    async def _manager_request(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Let the SDK serve a request; True when its response went out whole."""
        assert self._manager is not None  # requests arrive only while _serve runs it
        state = {"started": False, "complete": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["complete"] = True
            await send(message)

        try:
            await self._manager.handle_request(scope, receive, tracked)
            # Ended without its last body: the client went away (the SDK stops an event stream
            # when it reads the disconnect).
            return state["complete"]
        except asyncio.CancelledError:
            # The host's loop is shutting down (asyncio.run cancels every task) or the bridge
            # closes: the request ends here, with a proper end, not as uvicorn's logged error.
            log.debug("host tool bridge: a request was cancelled (the loop or the turn ended)")
        except RuntimeError as exc:
            if not self._closing.is_set() and self._manager_alive():
                raise
            # The SDK's session manager has already stopped (a loop shutting down).
            log.debug("host tool bridge: a request after the SDK stopped: %s", exc)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            if not state["started"]:
                await respond_error(send, 503, "the host tool bridge is closing: the turn ended")
            elif not state["complete"]:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    def _manager_alive(self) -> bool:
        task = self._serve_task
        return task is not None and not task.done() and not task.cancelling()

    def _authorized(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        given = [value for key, value in headers if key.lower() == _TOKEN_HEADER_KEY]
        # One value, compared in constant time; two values never pass (which one would count?).
        return len(given) == 1 and hmac.compare_digest(given[0], self._token)

    async def _read_body(
        self, headers: Sequence[tuple[bytes, bytes]], receive: Receive, send: Send
    ) -> bytes | None:
        """The whole request body, or None after answering 413/400 (or when the client left)."""
        declared = next((v for k, v in headers if k.lower() == b"content-length"), None)
        length = 0
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await respond_error(send, 400, "bad request: Content-Length is not a number")
                return None
        try:
            body = await read_body(receive, self.max_body_bytes, declared=length)
        except ClientDisconnect:
            return None
        if body is None:
            await respond_error(send, 413, f"request body too large (limit {self.max_body_bytes} bytes)")
        return body
