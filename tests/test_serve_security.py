"""`agy-provider serve`'s door: the token (no token, a wrong one, one in the URL → 401 in each
API's shape), bodies over the cap (413, declared or counted), a header cap, no CORS; the command
refusing a non-loopback bind without a token; the real command under SIGTERM and SIGINT (drain,
stop, no agy left) with its token never in what it prints beyond the one line that gives it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_helpers import agy_processes
from live_helpers import leftovers
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import ServeProcess
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

from agy_provider.cli import main
from agy_provider.hosts.serve.http import MAX_BODY_BYTES

# Past the body cap (32 MiB, which an over-long context must fit under to be counted).
OVER_CAP = MAX_BODY_BYTES + 1024 * 1024
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
BODY = {"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}


def openai_shaped(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status
    error = response.json()["error"]
    assert error["message"] and "type" in error
    return dict(error)


def anthropic_shaped(response: httpx.Response, status: int, kind: str) -> None:
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]


async def test_no_token_a_wrong_one_or_one_in_the_url_is_401(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base) as http:
        error = openai_shaped(await http.post(CHAT, json=BODY), 401)
        assert error["code"] == "invalid_api_key"
        anthropic_shaped(await http.post(MESSAGES, json=BODY), 401, "authentication_error")
        wrong = "x" * len(served.token)
        for headers in ({"authorization": f"Bearer {wrong}"}, {"x-api-key": wrong}):
            openai_shaped(await http.post(CHAT, json=BODY, headers=headers), 401)
            anthropic_shaped(
                await http.post(MESSAGES, json=BODY, headers=headers), 401, "authentication_error"
            )
        # In the URL it would reach logs and histories: refused even beside the right header.
        for query in (f"?api_key={served.token}", f"?key=x&token={served.token}"):
            response = await http.post(CHAT + query, json=BODY, headers=served.headers())
            assert "URL" in openai_shaped(response, 401)["message"]
        response = await http.get(f"/v1/models?api_key={served.token}")
        openai_shaped(response, 401)
        assert (
            await http.get("/v1/models", headers={"x-api-key": served.token})
        ).status_code == 200
    assert not await asyncio.to_thread(agy_processes, served.app)


async def test_a_body_over_the_cap_is_413_declared_or_not(served: Served) -> None:
    big = b'{"model": "default", "messages": [], "pad": "' + b"x" * OVER_CAP + b'"}'

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        openai_shaped(await http.post(CHAT, content=big), 413)
        anthropic_shaped(await http.post(MESSAGES, content=big), 413, "request_too_large")
        try:
            response = await http.post(CHAT, content=chunked())
        except httpx.TransportError:
            pass  # the server answered and closed before the client finished sending
        else:
            openai_shaped(response, 413)
        # The server still serves.
        assert (await http.get("/v1/models")).status_code == 200


async def test_headers_are_capped_and_no_cors_is_offered(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        try:
            huge = await http.get("/v1/models", headers={"x-pad": "y" * 200_000})
        except httpx.TransportError:
            pass  # the connection was dropped: refused just the same
        else:
            assert huge.status_code >= 400
        origin = {"origin": "https://evil.example", "access-control-request-method": "POST"}
        for response in (
            await http.options(CHAT, headers=origin),
            await http.get("/v1/models", headers={"origin": "https://evil.example"}),
        ):
            assert not [h for h in response.headers if h.startswith("access-control-")]


async def test_bad_requests_are_answered_in_the_apis_shape(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        openai_shaped(await http.post(CHAT, content=b"{not json"), 400)
        anthropic_shaped(
            await http.post(MESSAGES, json={"model": "m"}), 400, "invalid_request_error"
        )
        openai_shaped(await http.get("/v1/nothing-here"), 404)
        response = await http.post(CHAT, json={**BODY, "user": "has spaces"})
        assert openai_shaped(response, 400)["param"] == "user"
        response = await http.post(CHAT, json=BODY, headers={"x-agy-session": "-bad"})
        openai_shaped(response, 400)
        # Shapes no field check foresaw are a 400 too, never a 500 or a traceback.
        for odd in ({"tool_calls": 5}, {"content": {"a": 1}}, {"tool_calls": [{"function": 1}]}):
            messages = [{"role": "user", "content": "x"}, {"role": "assistant", **odd}]
            openai_shaped(await http.post(CHAT, json={**BODY, "messages": messages}), 400)


# --- the command -------------------------------------------------------------------------------


def test_a_non_loopback_bind_without_a_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGY_PROVIDER_SERVE_TOKEN", raising=False)
    for argv in (["serve", "--host", "0.0.0.0"], ["serve", "--host", "192.168.1.7", "--port", "0"]):
        err = io.StringIO()
        assert main(argv, out=io.StringIO(), err=err) == 2
        assert "without a token" in err.getvalue()
    err = io.StringIO()
    assert main(["serve", "--token", "short"], out=io.StringIO(), err=err) == 2
    assert "at least" in err.getvalue()


@pytest.fixture
def serve_env(live_env: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("AGY_PROVIDER_SERVE_TOKEN", None)
    yield env
    assert not leftovers(live_env)


def stream_lines(base: str, token: str, path: str, body: dict[str, Any]) -> Iterator[str]:
    with (
        httpx.Client(
            base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=120
        ) as http,
        http.stream("POST", path, json={**body, "stream": True}) as response,
    ):
        assert response.status_code == 200
        yield from response.iter_lines()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_the_running_stream_then_stops_with_no_agy_left(
    serve_env: dict[str, str], live_env: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    token = "serve-test-token-" + "k" * 24
    env = {**serve_env, "AGY_PROVIDER_SERVE_TOKEN": token, "AGY_SIM_SCENARIO": "slow"}
    server = ServeProcess(env)
    text = ""
    signalled = False
    for line in stream_lines(server.base, token, CHAT, BODY):
        if not signalled and "reasoning_content" in line:
            assert agy_processes(live_env)
            server.proc.send_signal(signum)  # mid-turn: the stream is let finish (the drain)
            signalled = True
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    assert signalled and text == scenario_answer("slow")
    code, printed = server.finish(signum)
    assert code == 0, printed
    assert "stopped" in printed
    assert token not in printed  # given by the user: never printed, never logged
    assert not agy_processes(live_env)


@pytest.mark.slow
def test_a_made_token_is_printed_once_and_never_logged(
    serve_env: dict[str, str], live_env: Path
) -> None:
    server = ServeProcess({**serve_env, "AGY_SIM_SCENARIO": "default"})
    (token,) = re.findall(r"token (\S+)\n", "".join(server.lines))
    with httpx.Client(base_url=server.base, timeout=120) as http:
        assert http.get(f"/v1/models?api_key={token}").status_code == 401
        assert http.get("/v1/models", headers={"x-api-key": token[:-1] + "!"}).status_code == 401
        ok = http.post(CHAT, json=BODY, headers={"authorization": f"Bearer {token}"})
        assert ok.json()["choices"][0]["message"]["content"] == scenario_answer("default")
    code, printed = server.finish(signal.SIGTERM)
    assert code == 0
    assert printed.count(token) == 1, printed


# --- hostile requests and DNS rebinding ---------------------------------------------------------


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    """One request on an open connection: (status, its JSON body)."""
    writer.write(head.encode() + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, json.loads(await reader.readexactly(length))


async def test_hostile_bodies_are_400s_on_a_connection_that_goes_on(served: Served) -> None:
    port = int(served.base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {{path}} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nx-api-key: {served.token}\r\n"
        "content-type: application/json\r\n"
    )
    hostile = [
        b"[" * 200_000,  # ≈200 KB of nesting: once a RecursionError and a plain-text 500
        b'{"model": "default", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"model": "default", "messages": "\xff\xfe"}',
        b'["a", "list"]',
        b'{"model": "default", "n": ' + b"9" * 10_000 + b"}",
        # A tool schema nested past any real one, in an otherwise good request.
        json.dumps({**BODY, "tools": [{"name": "t", "input_schema": {"a": "DEEP"}}]})
        .encode()
        .replace(b'"DEEP"', b"[" * 300 + b"]" * 300),
    ]
    try:
        for path in (CHAT, MESSAGES):
            for body in hostile:
                status, answer = await exchange(reader, writer, head.format(path=path), body)
                assert status == 400, (path, body[:40], answer)
                if path == MESSAGES:
                    assert answer["type"] == "error"
                    assert answer["error"]["type"] == "invalid_request_error"
                else:
                    assert answer["error"]["type"] == "invalid_request_error"
                assert "Traceback" not in json.dumps(answer)
        # The same connection, a good request after them all.
        status, answer = await exchange(
            reader, writer, head.format(path=CHAT), json.dumps(BODY).encode()
        )
        assert status == 200
        assert answer["choices"][0]["message"]["content"] == scenario_answer("default")
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_foreign_host_or_origin_is_403_before_the_token(served: Served) -> None:
    port = served.base.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=served.base) as http:
        for headers in (
            {"host": f"evil.example:{port}"},
            {"host": "127.0.0.1:1"},  # another port: another server's name
            {"host": f"attacker.test:{port}", **served.headers()},  # with the right token too
            {"origin": "https://evil.example", **served.headers()},
            {"origin": f"http://attacker.test:{port}", **served.headers()},
            {"origin": "null", **served.headers()},
        ):
            openai_shaped(await http.post(CHAT, json=BODY, headers=headers), 403)
            anthropic_shaped(
                await http.post(MESSAGES, json=BODY, headers=headers), 403, "permission_error"
            )
        # Loopback names at our port, and pages of our own origin, are served (a 400: the body
        # reached the routes, which then refused it).
        for headers in (
            {"host": f"localhost:{port}"},
            {"host": f"[::1]:{port}"},
            {"host": f"127.0.0.1:{port}", "origin": f"http://localhost:{port}"},
        ):
            response = await http.post(MESSAGES, json={}, headers={**headers, **served.headers()})
            anthropic_shaped(response, 400, "invalid_request_error")
        # The base URL answers a probe without a token (Claude Code sends `HEAD /`).
        assert (await http.head("/")).status_code == 200
        assert (await http.get("/")).json()["name"] == "agy-provider serve"
        assert (await http.get("/", headers={"host": "evil.example"})).status_code == 403
