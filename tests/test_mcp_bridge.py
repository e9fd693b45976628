"""The MCP bridge on the official `mcp` SDK: its server against the SDK's own client, agy-sim's
MCP client end to end, and the runner's extra `--add-dir` folders.

The SDK's client speaks every era the bridge must serve: the initialize handshake, the handshake
with agy's newer `MCP-Protocol-Version: 2026-07-28` header on every request, and the stateless
2026-07-28 envelope. Raw statuses (403, 413) are read from the client's own responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from waiting import until_true

mcp = pytest.importorskip("mcp", reason="the MCP bridge needs the `mcp` SDK (a dependency)")

import httpx2  # noqa: E402  (installed with mcp)
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from agy_provider.bridge.mcp_bridge import CONFIG_RELATIVE_PATH  # noqa: E402
from agy_provider.bridge.mcp_bridge import TOKEN_HEADER  # noqa: E402
from agy_provider.bridge.mcp_bridge import HostToolBridge  # noqa: E402
from agy_provider.bridge.mcp_bridge import ParkedToolCalls  # noqa: E402
from agy_provider.bridge.mcp_bridge import plugin_host_tools  # noqa: E402
from agy_provider.bridge.mcp_bridge import plugin_tool_handler  # noqa: E402
from agy_provider.contract.host_tools import HostTool  # noqa: E402
from agy_provider.contract.host_tools import HostToolCall  # noqa: E402
from agy_provider.contract.host_tools import HostToolResult  # noqa: E402
from agy_provider.contract.host_tools import RegisterHostTool  # noqa: E402
from agy_provider.contract.turn import TurnContext  # noqa: E402
from agy_provider.errors import UsageError  # noqa: E402
from agy_provider.hookspecs import hookimpl  # noqa: E402
from agy_provider.live.runner import TurnRequest  # noqa: E402
from agy_provider.live.runner import build_argv  # noqa: E402
from agy_provider.pi.types import Tool  # noqa: E402
from agy_provider.plugin_manager import get_plugin_manager  # noqa: E402
from agy_provider.store.config import Config  # noqa: E402

LOOKUP = HostTool("lookup_order", "Look up an order by its id", TOOL_PARAMETERS)
MODES = ["legacy", "auto", "2026-07-28"]


class Recorder:
    """A handler that records every call and answers from the arguments."""

    def __init__(self) -> None:
        self.calls: list[HostToolCall] = []

    async def __call__(self, call: HostToolCall) -> HostToolResult:
        self.calls.append(call)
        return HostToolResult(f"order {call.arguments['order_id']}: shipped")


class Statuses:
    """HTTP statuses the SDK's client received (an httpx2 response hook)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def __call__(self, response: httpx2.Response) -> None:
        self.seen.append(response.status_code)


def http_client(
    headers: dict[str, str] | None = None,
    *,
    statuses: Statuses | None = None,
    version_header: str | None = None,
    read_timeout: float = 60.0,
) -> httpx2.AsyncClient:
    """An httpx2 client for the SDK; `version_header` overrides MCP-Protocol-Version on every
    request, as agy's client does after negotiating."""

    async def force_version(request: httpx2.Request) -> None:
        assert version_header is not None
        request.headers["mcp-protocol-version"] = version_header

    hooks: dict[str, list[Any]] = {"request": [], "response": []}
    if statuses is not None:
        hooks["response"].append(statuses)
    if version_header is not None:
        hooks["request"].append(force_version)
    return httpx2.AsyncClient(
        trust_env=False,
        headers=headers or {},
        timeout=httpx2.Timeout(30.0, read=read_timeout),
        event_hooks=hooks,
    )


def mcp_errors(exc: BaseException) -> list[MCPError]:
    """Every MCPError inside an exception (the SDK's task groups wrap them)."""
    if isinstance(exc, MCPError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [e for inner in exc.exceptions for e in mcp_errors(inner)]
    return []


@pytest.fixture
async def bridge() -> AsyncIterator[tuple[HostToolBridge, Recorder]]:
    recorder = Recorder()
    async with HostToolBridge([LOOKUP], recorder) as running:
        yield running, recorder


# --- the server, with the SDK's client -------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_sdk_client_lists_and_calls_a_host_tool(
    bridge: tuple[HostToolBridge, Recorder], mode: str
) -> None:
    running, recorder = bridge
    async with (
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode=mode) as client,
    ):
        listed = await client.list_tools()
        result = await client.call_tool("lookup_order", {"order_id": "A-1042", "verbose": True})
    assert [(t.name, t.description, t.input_schema) for t in listed.tools] == [
        (LOOKUP.name, LOOKUP.description, dict(LOOKUP.parameters))
    ]
    assert [(c.name, dict(c.arguments)) for c in recorder.calls] == [
        ("lookup_order", {"order_id": "A-1042", "verbose": True})
    ]
    assert result.is_error is False
    assert [block.text for block in result.content if block.type == "text"] == [
        "order A-1042: shipped"
    ]


async def test_requests_leave_no_access_lines_in_the_hosts_log(
    bridge: tuple[HostToolBridge, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    """A host whose root logger has a handler (caplog's) gets no uvicorn access line per MCP
    request: uvicorn logs them whenever any handler is up the tree, whatever its config says."""
    running, _recorder = bridge
    with caplog.at_level(logging.INFO):
        async with (
            http_client(running.headers()) as hc,
            Client(streamable_http_client(running.url, http_client=hc), mode=MODES[0]) as client,
        ):
            await client.call_tool("lookup_order", {"order_id": "A-1042"})
    assert [r for r in caplog.records if r.name == "uvicorn.access"] == []


async def test_agys_2026_07_28_header_on_a_handshake_session_is_served(
    bridge: tuple[HostToolBridge, Recorder],
) -> None:
    """agy negotiates with initialize, then sends MCP-Protocol-Version 2026-07-28 on every
    request (AGY-FORMATS §2); the SDK alone routes that to its stateless path and answers 400."""
    running, recorder = bridge
    statuses = Statuses()
    async with (
        http_client(running.headers(), statuses=statuses, version_header="2026-07-28") as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="legacy") as client,
    ):
        result = await client.call_tool("lookup_order", {"order_id": "B-7"})
    assert result.is_error is False
    assert [c.arguments for c in recorder.calls] == [{"order_id": "B-7"}]
    assert statuses.seen and all(s < 400 for s in statuses.seen), statuses.seen


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_without_the_token_every_request_is_403(
    bridge: tuple[HostToolBridge, Recorder], mode: str
) -> None:
    running, recorder = bridge
    statuses = Statuses()
    with pytest.raises(BaseException) as raised:
        async with (
            http_client(statuses=statuses) as hc,
            Client(streamable_http_client(running.url, http_client=hc), mode=mode) as client,
        ):
            await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert statuses.seen and set(statuses.seen) == {403}, statuses.seen
    assert any("forbidden" in str(e) for e in mcp_errors(raised.value)), raised.value
    assert recorder.calls == []


async def test_a_wrong_or_doubled_token_is_403(bridge: tuple[HostToolBridge, Recorder]) -> None:
    running, _ = bridge
    token = running.headers()[TOKEN_HEADER]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    async with httpx2.AsyncClient(trust_env=False) as hc:
        for headers in (
            [(TOKEN_HEADER, wrong)],
            [(TOKEN_HEADER, token), (TOKEN_HEADER, token)],
            [(TOKEN_HEADER, "")],
        ):
            response = await hc.post(running.url, json=body, headers=headers)
            assert response.status_code == 403, headers
        elsewhere = await hc.post(
            running.url.replace("/mcp", "/other"), json=body, headers={TOKEN_HEADER: token}
        )
        assert elsewhere.status_code == 404


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_body_over_the_cap_is_413_and_never_reaches_the_host(mode: str) -> None:
    recorder = Recorder()
    statuses = Statuses()
    async with (
        HostToolBridge([LOOKUP], recorder, max_body_bytes=4096) as running,
        http_client(running.headers(), statuses=statuses) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode=mode) as client,
    ):
        with pytest.raises(MCPError, match="too large"):
            await client.call_tool("lookup_order", {"order_id": "x" * 5000})
        assert statuses.seen[-1] == 413
        # The session goes on: a call under the cap still works.
        small = await client.call_tool("lookup_order", {"order_id": "ok"})
    assert small.is_error is False
    assert [c.arguments for c in recorder.calls] == [{"order_id": "ok"}]


async def test_a_chunked_body_over_the_cap_is_413() -> None:
    """No Content-Length: the cap is counted while the body arrives."""
    async with HostToolBridge([LOOKUP], Recorder(), max_body_bytes=1000) as running:

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(20):
                yield b" " * 100

        async with httpx2.AsyncClient(trust_env=False) as hc:
            response = await hc.post(
                running.url,
                content=chunks(),
                headers={**running.headers(), "content-type": "application/json"},
            )
    assert response.status_code == 413


def _arriving(*messages: dict[str, Any]) -> Any:
    """A `receive` that hands over `messages` in order, counting how many were taken."""
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        receive.taken += 1  # type: ignore[attr-defined]
        return queue.pop(0)

    receive.taken = 0  # type: ignore[attr-defined]
    return receive


def _part(body: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


@pytest.mark.parametrize(
    ("declared", "read_up_to", "parts", "expected", "taken"),
    [
        (0, None, [_part(b"ab"), _part(b"cd", more=False)], b"abcd", 2),
        (0, None, [_part(b"x" * 6), _part(b"y", more=False)], None, 1),  # refused at once
        (11, None, [_part(b"z", more=False)], None, 0),  # declared past the cap: nothing read
        (0, 40, [_part(b"x" * 6), _part(b"y", more=False)], None, 2),  # read and dropped
        (0, 40, [_part(b"x" * 30), _part(b"y" * 30)], None, 2),  # dropped up to 40 bytes only
        (41, 40, [_part(b"z", more=False)], None, 0),
        # declared past the cap but under what is read to drop it: still refused, whatever came
        (9, 40, [_part(b"z", more=False)], None, 1),
    ],
)
async def test_the_shared_body_reader_keeps_the_cap_as_each_caller_sets_it(
    declared: int, read_up_to: int | None, parts: list[Any], expected: bytes | None, taken: int
) -> None:
    from agy_provider.http_serving import read_body

    receive = _arriving(*parts)
    body = await read_body(receive, 5, declared=declared, read_up_to=read_up_to)
    assert (body, receive.taken) == (expected, taken)


async def test_the_shared_body_reader_says_when_the_client_left() -> None:
    from starlette.requests import ClientDisconnect

    from agy_provider.http_serving import read_body
    from agy_provider.http_serving import replay_body

    with pytest.raises(ClientDisconnect):
        await read_body(_arriving(_part(b"ab"), {"type": "http.disconnect"}), 5)
    replayed = replay_body(b"ab", _arriving({"type": "http.disconnect"}))
    assert await replayed() == _part(b"ab", more=False)
    assert await replayed() == {"type": "http.disconnect"}


async def test_arguments_are_checked_against_the_schema_before_the_host_runs(
    bridge: tuple[HostToolBridge, Recorder],
) -> None:
    running, recorder = bridge
    async with (
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="legacy") as client,
    ):
        wrong_type = await client.call_tool("lookup_order", {"order_id": 42})
        missing = await client.call_tool("lookup_order", {})
        unknown = await client.call_tool("delete_everything", {})
    assert wrong_type.is_error and "order_id" in wrong_type.content[0].text  # type: ignore[union-attr]
    assert missing.is_error and "required" in missing.content[0].text  # type: ignore[union-attr]
    assert unknown.is_error and "lookup_order" in unknown.content[0].text  # type: ignore[union-attr]
    assert recorder.calls == []


async def test_a_failing_handler_becomes_an_error_result() -> None:
    async def broken(call: HostToolCall) -> HostToolResult:
        raise RuntimeError("the database is down")

    async with (
        HostToolBridge([LOOKUP], broken) as running,
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="legacy") as client,
    ):
        result = await client.call_tool("lookup_order", {"order_id": "A"})
        error = await client.call_tool("lookup_order", {"order_id": "B"})
    assert result.is_error
    assert "RuntimeError: the database is down" in result.content[0].text  # type: ignore[union-attr]
    assert error.is_error


async def test_an_error_result_from_the_host_is_is_error() -> None:
    async def refuses(call: HostToolCall) -> HostToolResult:
        return HostToolResult("no such order", is_error=True)

    async with (
        HostToolBridge([LOOKUP], refuses) as running,
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="2026-07-28") as client,
    ):
        result = await client.call_tool("lookup_order", {"order_id": "A"})
    assert result.is_error is True
    assert result.content[0].text == "no such order"  # type: ignore[union-attr]


@pytest.fixture
def fast_keepalives(monkeypatch: pytest.MonkeyPatch) -> None:
    """SSE keepalive pings every 0.1 s on both transports (the SDK's default is 15 s)."""
    from mcp.server import _streamable_http_modern
    from sse_starlette import EventSourceResponse

    monkeypatch.setattr(EventSourceResponse, "DEFAULT_PING_INTERVAL", 0.1)
    monkeypatch.setattr(_streamable_http_modern, "_SSE_PING_INTERVAL", 0.1)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_call_the_host_answers_much_later_completes(
    fast_keepalives: None, mode: str
) -> None:
    """A parked call outlives the client's read timeout several times over: the response
    stream's keepalives hold it open until the host answers."""
    parked = ParkedToolCalls()
    async with (
        HostToolBridge([LOOKUP], parked.handle) as running,
        http_client(running.headers(), read_timeout=1.5) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode=mode) as client,
    ):
        calling = asyncio.ensure_future(client.call_tool("lookup_order", {"order_id": "slow"}))
        call = await asyncio.wait_for(parked.next_call(), 30)
        assert [c.id for c in running.pending_calls] == [call.id] == [c.id for c in parked.pending]
        await asyncio.sleep(3.5)  # more than twice the client's read timeout
        assert not calling.done()
        assert parked.resolve(call.id, "order slow: delivered at last") is True
        result = await asyncio.wait_for(calling, 30)
    assert result.is_error is False
    assert result.content[0].text == "order slow: delivered at last"  # type: ignore[union-attr]
    assert call.arguments == {"order_id": "slow"}
    assert parked.resolve(call.id, "again") is False  # answered once


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_closing_with_a_call_pending_fails_it_cleanly(mode: str) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def never(call: HostToolCall) -> HostToolResult:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    running = await HostToolBridge([LOOKUP], never).start()
    folder = running.config_dir
    async with (
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode=mode) as client,
    ):
        calling = asyncio.ensure_future(client.call_tool("lookup_order", {"order_id": "A"}))
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.wait_for(running.aclose(), 30)
        result = await asyncio.wait_for(calling, 30)
    assert result.is_error is True
    assert "closed the host tool bridge" in result.content[0].text  # type: ignore[union-attr]
    assert cancelled.is_set()
    assert running.pending_calls == ()
    assert not os.path.exists(folder)
    with pytest.raises(OSError):
        _, writer = await asyncio.open_connection("127.0.0.1", int(running.url.split(":")[2][:-4]))
        writer.close()
    await running.aclose()  # idempotent


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_agy_going_away_cancels_the_host_callback(mode: str) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def waits(call: HostToolCall) -> HostToolResult:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with HostToolBridge([LOOKUP], waits) as running:
        hc = http_client(running.headers())
        client = Client(streamable_http_client(running.url, http_client=hc), mode=mode)
        async with hc, client:
            calling = asyncio.ensure_future(client.call_tool("lookup_order", {"order_id": "A"}))
            await asyncio.wait_for(started.wait(), 30)
            calling.cancel()
            with pytest.raises(asyncio.CancelledError):
                await calling
        await asyncio.wait_for(cancelled.wait(), 30)
        assert running.pending_calls == ()


# --- the config folder ------------------------------------------------------------------------


async def test_the_config_folder_names_the_server_privately_and_goes_away(
    tmp_path: Path,
) -> None:
    async with HostToolBridge(
        [LOOKUP], Recorder(), server_name="pi_tools", parent_dir=tmp_path
    ) as running:
        folder = Path(running.config_dir)
        config_file = folder / CONFIG_RELATIVE_PATH
        assert folder.parent == tmp_path
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / ".agents").stat().st_mode) == 0o700
        assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
        assert json.loads(config_file.read_text()) == {
            "mcpServers": {"pi_tools": {"serverUrl": running.url, "headers": running.headers()}}
        }
        assert sorted(p.name for p in (folder / ".agents").iterdir()) == ["mcp_config.json"]
        assert running.url.startswith("http://127.0.0.1:") and running.url.endswith("/mcp")
        assert running.headers()[TOKEN_HEADER] not in repr(running)
    assert not folder.exists()
    assert list(tmp_path.iterdir()) == []


async def test_cancelling_a_start_at_any_point_leaves_nothing_behind(tmp_path: Path) -> None:
    for yields in range(40):
        running = HostToolBridge([LOOKUP], Recorder(), parent_dir=tmp_path)
        starting = asyncio.ensure_future(running.start())
        for _ in range(yields):
            await asyncio.sleep(0)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await running.aclose()
        assert list(tmp_path.iterdir()) == [], yields
        assert running.pending_calls == ()


async def test_every_bridge_has_its_own_port_and_token() -> None:
    async with (
        HostToolBridge([LOOKUP], Recorder()) as one,
        HostToolBridge([LOOKUP], Recorder()) as two,
    ):
        assert one.url != two.url
        assert one.headers() != two.headers()
        async with httpx2.AsyncClient(trust_env=False) as hc:
            crossed = await hc.post(
                two.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers=one.headers(),
            )
        assert crossed.status_code == 403


def test_bad_tools_and_names_are_refused_by_name() -> None:
    async def handler(call: HostToolCall) -> str:
        return ""

    with pytest.raises(UsageError, match="twice"):
        HostToolBridge([LOOKUP, LOOKUP], handler)
    with pytest.raises(UsageError, match="not a valid MCP tool name"):
        HostToolBridge([HostTool("has space", "")], handler)
    with pytest.raises(UsageError, match="type 'object'"):
        HostToolBridge([HostTool("t", "", {"type": "string"})], handler)
    with pytest.raises(UsageError, match="not a valid JSON Schema"):
        HostToolBridge([HostTool("t", "", {"type": "object", "properties": 3})], handler)
    with pytest.raises(UsageError, match="server name"):
        HostToolBridge([LOOKUP], handler, server_name="no/slash")


async def test_pi_tools_without_a_schema_type_are_objects() -> None:
    tools = [Tool("now", "The time", {}), Tool("echo", "Echo", {"properties": {"x": {}}})]
    async with (
        HostToolBridge(tools, Recorder()) as running,
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="legacy") as client,
    ):
        listed = await client.list_tools()
    assert {t.name: t.input_schema["type"] for t in listed.tools} == {
        "now": "object",
        "echo": "object",
    }


# --- plugins ------------------------------------------------------------------------------------


class WeatherPlugin:
    @hookimpl
    def register_host_tools(self, register: RegisterHostTool) -> None:
        register(
            "weather",
            "The weather in a city",
            {"type": "object", "properties": {"city": {"type": "string"}}},
        )

    @hookimpl
    def invoke_host_tool(
        self, name: str, arguments: Mapping[str, Any], turn: TurnContext
    ) -> object:
        if name != "weather":
            return None
        return {"city": arguments["city"], "sky": "clear", "session": turn.session_id}


# The turn the hook is told about: it reaches the plugin as given.
WEATHER_TURN = TurnContext("turn-7", "", ".", Config(), "auto", "ask")


@pytest.fixture
def weather_plugin() -> Iterator[None]:
    pm = get_plugin_manager()
    plugin = WeatherPlugin()
    pm.register(plugin, name="test-weather")
    try:
        yield
    finally:
        pm.unregister(plugin)


async def test_plugin_tools_are_offered_and_run_through_the_hook(weather_plugin: None) -> None:
    tools = plugin_host_tools()
    assert [t.name for t in tools] == ["weather"]
    async with (
        HostToolBridge(tools, plugin_tool_handler(WEATHER_TURN)) as running,
        http_client(running.headers()) as hc,
        Client(streamable_http_client(running.url, http_client=hc), mode="legacy") as client,
    ):
        result = await client.call_tool("weather", {"city": "Lyon"})
    assert result.is_error is False
    assert json.loads(result.content[0].text) == {"city": "Lyon", "sky": "clear", "session": "turn-7"}  # type: ignore[union-attr]


# --- the runner's extra folders ---------------------------------------------------------------


def test_extra_dirs_become_add_dir_arguments(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    request = TurnRequest(
        prompt="hi", cwd=str(tmp_path), agy_bin="agy", extra_dirs=(str(one), str(two))
    )
    argv = build_argv(request)
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--add-dir"]
    assert pairs == [str(tmp_path), str(one), str(two)]


@pytest.mark.parametrize("bad", ["relative/dir", "/no/such/folder/anywhere", "FILE"])
def test_extra_dirs_must_be_absolute_existing_folders(tmp_path: Path, bad: str) -> None:
    if bad == "FILE":
        (tmp_path / "f").write_text("")
        bad = str(tmp_path / "f")
    request = TurnRequest(prompt="hi", cwd=str(tmp_path), agy_bin="agy", extra_dirs=(bad,))
    with pytest.raises(UsageError, match="--add-dir"):
        build_argv(request)


# --- end to end: agy-sim as the MCP client ------------------------------------------------------

async def run_agy_sim(
    request: TurnRequest, state: Path, scenario: str = "mcp-host-tool"
) -> tuple[int | None, bytes, bytes]:
    """agy-sim runs `request` (stream-json, `scenario`, state in `state`); its exit code, stdout
    and stderr. Killed if it outlives the bound."""
    env = {
        **os.environ,
        "ANTIGRAVITY_APP_DATA_DIR": str(state),
        "AGY_SIM_SCENARIO": scenario,
        "AGY_SIM_SPEED": "10",
        "AGY_SIM_NO_SERVER": "1",
    }
    process = await asyncio.create_subprocess_exec(
        *build_argv(request),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=request.cwd,
        env=env,
        start_new_session=True,
        limit=16 * 1024 * 1024,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 200)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode, out, err



@pytest.mark.slow
@pytest.mark.parametrize("server_name", ["host", ""])
async def test_agy_sim_calls_a_host_tool_through_the_bridge_and_answers_with_it(
    tmp_path: Path, server_name: str
) -> None:
    """agy-sim reads the bridge's folder from its --add-dir roots, calls the scenario's host tool,
    writes the MCP tool step (type 38, field 47) and answers with the result; the replayed
    database shows both. `server_name` "" is a scenario naming no server (the first one found)."""
    from live_helpers import agy_sim_path
    from live_helpers import scenario_answer

    from agy_provider.agy.step import StepKind
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay
    from agy_provider.sim.scenario import MCP_RESULT_PLACEHOLDER
    from agy_provider.sim.scenario import PlannerSpec
    from agy_provider.sim.scenario import load_scenario

    scenario_file = Path(__file__).parents[1] / "agy_provider/sim/scenarios/mcp-host-tool.json"
    document = json.loads(scenario_file.read_text())
    document["turns"][0]["steps"][0]["tools"][0]["mcp"]["server"] = server_name
    scenario_path = tmp_path / "mcp-host-tool.json"
    scenario_path.write_text(json.dumps(document))
    scenario = load_scenario(scenario_path)
    spec = next(
        t.mcp
        for s in scenario.turn(0).steps
        if isinstance(s, PlannerSpec)
        for t in s.tools
        if t.mcp is not None
    )
    workspace, state = tmp_path / "work", tmp_path / "state"
    workspace.mkdir()
    state.mkdir()
    calls: list[HostToolCall] = []

    async def lookup(call: HostToolCall) -> HostToolResult:
        calls.append(call)
        await asyncio.sleep(0.3)  # a host takes a moment; agy-sim waits for it
        return HostToolResult(f"order {call.arguments['order_id']} shipped on 2026-11-28")

    async with HostToolBridge([LOOKUP], lookup, server_name="host") as running:
        request = TurnRequest(
            prompt="Where is my order A-1042?",
            cwd=str(workspace),
            agy_bin=agy_sim_path(),
            extra_dirs=(running.config_dir,),
            print_timeout=180,
        )
        returncode, out, err = await run_agy_sim(request, state, str(scenario_path))
    assert returncode == 0, err.decode()

    expected_result = "order A-1042 shipped on 2026-11-28"
    answer = scenario_answer("mcp-host-tool").replace(MCP_RESULT_PLACEHOLDER, expected_result)
    assert expected_result in answer
    assert [(c.name, dict(c.arguments)) for c in calls] == [(spec.tool, dict(spec.arguments))]

    lines = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    result = lines[-1]["result"]
    assert (result["status"], result["response"]) == ("SUCCESS", answer)
    printed = [
        e["step_update"]
        for e in lines
        if e.get("event") == "step_update" and e["step_update"].get("step_type") == "tool"
    ]
    assert printed[-1]["tool_name"] == "mcp_host_lookup_order"
    assert printed[-1]["tool_info"]["output"] == expected_result

    database = state / "conversations" / f"{result['conversation_id']}.db"
    with load_recording(str(database)) as recording:
        (turn,) = list(replay(recording))
    tools = [s for s in turn.steps if s.kind is StepKind.TOOL]
    assert [
        (s.tool.name, dict(s.tool.arguments), s.result.output, s.result.is_error)
        for s in tools
        if s.tool is not None and s.result is not None
    ] == [("host/lookup_order", dict(spec.arguments), expected_result, False)]
    assert turn.events[-1].type == "done"
    message = turn.message
    texts = [b.text for b in message.content if b.type == "text"]
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    assert "".join(texts) == answer
    assert "host/lookup_order" in thinking and expected_result in thinking


@pytest.mark.slow
async def test_agy_sim_without_a_bridge_folder_records_the_failed_mcp_call(tmp_path: Path) -> None:
    """No `.agents/mcp_config.json` in any root: the MCP step ends in an error naming why, and
    the turn goes on."""
    from live_helpers import agy_sim_path

    from agy_provider.agy.step import StepKind
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay

    workspace, state = tmp_path / "work", tmp_path / "state"
    workspace.mkdir()
    state.mkdir()
    request = TurnRequest(
        prompt="Where is my order?", cwd=str(workspace), agy_bin=agy_sim_path(), print_timeout=120
    )
    returncode, out, err = await run_agy_sim(request, state)
    assert returncode == 0, err.decode()
    result = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")][-1]["result"]
    database = state / "conversations" / f"{result['conversation_id']}.db"
    with load_recording(str(database)) as recording:
        (turn,) = list(replay(recording))
    (tool,) = [s for s in turn.steps if s.kind is StepKind.TOOL]
    assert tool.result is not None and tool.result.is_error
    assert "not configured" in tool.result.output and "mcp_config.json" in tool.result.output


def test_the_mcp_tool_step_reads_the_same_from_its_row_and_its_rpc_json() -> None:
    """agy-sim's MCP step, decoded by our protobuf walker (rows) and, rendered as the language
    server renders it, by the RPC JSON decoder: one tool call, one result."""
    from agy_provider.agy.rows import decode_step_row
    from agy_provider.agy.rpcjson import decode_json_step
    from agy_provider.sim import descriptors as pb
    from agy_provider.sim.engine import Clock
    from agy_provider.sim.mcp_client import McpOutcome
    from agy_provider.sim.mcp_client import finish_mcp_tool_step
    from agy_provider.sim.mcp_client import mcp_tool_step
    from agy_provider.sim.payloads import StepFactory
    from agy_provider.sim.scenario import DEFAULT_CATALOG
    from agy_provider.sim.scenario import McpCallSpec
    from agy_provider.sim.scenario import ToolSpec
    from agy_provider.sim.step_reader import render_step

    factory = StepFactory(Clock().now, "exec-1", DEFAULT_CATALOG[0])
    spec = McpCallSpec(tool="lookup_order", arguments={"order_id": "A-1"}, server="host")
    call = factory.tool_call(
        ToolSpec("mcp_host_lookup_order", dict(spec.arguments), mcp=spec), "c1"
    )
    for outcome in (McpOutcome("order A-1: shipped"), McpOutcome("no such order", True)):
        step = mcp_tool_step(factory, "host", spec, call)
        finish_mcp_tool_step(factory, step, outcome)
        assert step.type == pb.STEP_TYPE["CORTEX_STEP_TYPE_MCP_TOOL"] == 38
        payload = step.SerializeToString()
        from_row = decode_step_row(3, step.type, step.status, payload)
        from_json = decode_json_step(render_step(payload, step.type, step.status), index=3)
        for decoded in (from_row, from_json):
            assert decoded.tool is not None and decoded.result is not None
            assert (decoded.tool.name, dict(decoded.tool.arguments)) == (
                "host/lookup_order",
                {"order_id": "A-1"},
            ), decoded
            assert (decoded.result.output, decoded.result.is_error) == (
                outcome.text,
                outcome.is_error,
            )


async def test_a_cancelled_agy_turn_stops_waiting_for_the_host(tmp_path: Path) -> None:
    """agy-sim's engine waiting on a parked host call: CancelCascadeSteps ends the turn CANCELED
    at once, its MCP step CANCELED, and the bridge's callback learns that agy went away."""
    from agy_provider.agy.step import StepKind
    from agy_provider.agy.step import StepStatus
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay
    from agy_provider.sim.engine import Clock
    from agy_provider.sim.engine import Simulator
    from agy_provider.sim.scenario import load_scenario

    parked = ParkedToolCalls()
    cancelled = asyncio.Event()

    async def handler(call: HostToolCall) -> HostToolResult:
        try:
            return await parked.handle(call)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    (tmp_path / "conversations").mkdir()
    async with HostToolBridge([LOOKUP], handler) as running:
        simulator = Simulator(
            load_scenario("mcp-host-tool"),
            tmp_path / "conversations",
            clock=Clock(speed=20),
            mcp_roots=[str(tmp_path), running.config_dir],
        )
        conversation = simulator.open()
        turn = asyncio.ensure_future(
            asyncio.to_thread(simulator.run_turn, conversation, "Where is my order?")
        )
        call = await asyncio.wait_for(parked.next_call(), 60)
        assert call.arguments == {"order_id": "A-1042", "verbose": True}
        simulator.cancel(conversation.id)
        result = await asyncio.wait_for(turn, 60)
        await asyncio.wait_for(cancelled.wait(), 60)
        assert parked.resolve(call.id, "too late") is False
    for c in simulator.conversations.values():
        c.writer.close()
    assert result.status == "CANCELED"
    with load_recording(str(tmp_path / "conversations" / f"{conversation.id}.db")) as recording:
        (replayed,) = list(replay(recording))
    (tool,) = [s for s in replayed.steps if s.kind is StepKind.TOOL]
    assert tool.status is StepStatus.CANCELED


@pytest.mark.slow
async def test_a_result_over_the_mcp_message_limit_reaches_agy_cut_with_a_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host tool answering over 1 MiB: agy-sim's SDK client refuses any event over 1 MiB, so the
    bridge cuts the text and says so; agy gets the kept head with the note, and the log tells."""
    from live_helpers import agy_sim_path

    from agy_provider.contract.host_tools import MAX_RESULT_BYTES

    workspace, state = tmp_path / "work", tmp_path / "state"
    workspace.mkdir()
    state.mkdir()
    # Quotes, control characters and non-ASCII: their JSON escapes count against the limit.
    line = 'order A-1042 "shipped" \x01 via Zürich → 東京\n'
    huge = "".join(f"{k:07d} {line}" for k in range(1024 * 1024 // len(line.encode())))
    assert len(json.dumps(huge, ensure_ascii=False).encode()) > 1024 * 1024

    async def lookup(call: HostToolCall) -> HostToolResult:
        return HostToolResult(huge)

    async with HostToolBridge([LOOKUP], lookup, server_name="host") as running:
        request = TurnRequest(
            prompt="Where is my order A-1042?",
            cwd=str(workspace),
            agy_bin=agy_sim_path(),
            extra_dirs=(running.config_dir,),
            print_timeout=180,
        )
        returncode, out, err = await run_agy_sim(request, state)
    assert returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    tool = [
        e["step_update"]
        for e in lines
        if e.get("event") == "step_update" and e["step_update"].get("step_type") == "tool"
    ][-1]
    # Before: "MCP server 'host' failed: SSEError: Server-sent event exceeded the … byte limit."
    output = tool["tool_info"].get("output", "")
    assert output, tool["tool_info"]
    head, _, note = output.rpartition("\n\n[agy-provider: this tool result was cut: ")
    assert head and huge.startswith(head)
    cut = len(huge) - len(head)
    assert note.startswith(f"{cut:,} of its {len(huge):,} characters are left out")
    assert len(json.dumps(output, ensure_ascii=False).encode()) <= MAX_RESULT_BYTES
    assert "more than an MCP message carries" in caplog.text


@pytest.mark.parametrize("agy_header", [False, True])
async def test_a_dropped_tools_call_post_on_a_live_session_releases_the_parked_call(
    agy_header: bool,
) -> None:
    """agy's HTTP request for a `tools/call` goes away (its connection closed, no
    `notifications/cancelled`) while the host still holds the call: the call is released, not
    left waiting for an answer nobody can receive. The session itself lives on."""
    import httpx
    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    parked = ParkedToolCalls()
    async with HostToolBridge([LOOKUP], parked.handle) as running:
        headers = {
            **running.headers(),
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            opened = await http.post(
                running.url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": LATEST_HANDSHAKE_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "agy", "version": "1"},
                    },
                },
            )
            assert opened.status_code == 200, opened.text
            session = {
                **headers,
                "mcp-session-id": opened.headers["mcp-session-id"],
                # agy's client names its newer version after negotiating (AGY-FORMATS §2).
                "mcp-protocol-version": "2026-07-28" if agy_header else LATEST_HANDSHAKE_VERSION,
            }
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(running.url, headers=session, json=note)).status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "lookup_order", "arguments": {"order_id": "A"}},
            }
            async with http.stream("POST", running.url, headers=session, json=call) as response:
                assert response.status_code == 200
                held = await asyncio.wait_for(parked.next_call(), 30)
                assert [c.id for c in parked.pending] == [held.id]
            # The response closed unread: httpx drops the connection under it. Before: the call
            # stayed parked for as long as the bridge lived.
            await until_true(
                lambda: not parked.pending and not running.pending_calls,
                "the call of a client that left is no longer pending",
            )
            assert parked.pending == () and running.pending_calls == ()
            assert parked.resolve(held.id, "too late") is False
            listed = await http.post(
                running.url,
                headers=session,
                json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}},
            )
            assert listed.status_code == 200 and "lookup_order" in listed.text
