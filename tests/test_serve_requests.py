"""`agy-provider serve` as Claude Code and clients naming their own models use it, end to end on
agy-sim: a Claude Code-shaped request (many tools with big schemas, adaptive thinking, system
blocks with cache_control, a mid-conversation system message, the JSON user_id, its betas)
through the real `anthropic` SDK, a tool round trip, the model map, the request log (`-v`,
`-vv`) — one line per request, never a token — and Continue's request shape (`openai` SDK).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import leftovers
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import ServeProcess
from serve_helpers import start_server

pytestmark = pytest.mark.slow

anthropic = pytest.importorskip("anthropic", reason="the serve extra is not installed")
openai = pytest.importorskip("openai", reason="the serve extra is not installed")

SESSION = "5b0c2f0e-8d7a-4c2b-9a51-0f3e2d1c4b6a"
USER_ID = json.dumps({"device_id": "a" * 64, "account_uuid": "", "session_id": SESSION})
BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,effort-2025-11-24,"
    "some-future-beta-2027-01-01"
)
LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order's status by its id.",
    "input_schema": TOOL_PARAMETERS,
}


def coding_tool(name: str, fields: int) -> dict[str, Any]:
    """A tool shaped like Claude Code's: a draft 2020-12 schema, long descriptions, no extras."""
    properties: dict[str, Any] = {
        f"field_{i}": {
            "description": f"What {name}'s field {i} means. " * 20,
            "type": ["string", "integer", "boolean"][i % 3],
        }
        for i in range(fields)
    }
    properties["nested"] = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"old_string": {"type": "string"}, "new_string": {"type": "string"}},
            "required": ["old_string", "new_string"],
            "additionalProperties": False,
        },
    }
    return {
        "name": name,
        "description": f"{name}: a tool of the coding agent. " * 60,
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": properties,
            "required": ["field_0"],
            "additionalProperties": False,
        },
    }


TOOLS = [
    coding_tool(name, 6)
    for name in (
        *("Agent", "Bash", "Edit", "Glob", "Grep", "NotebookEdit", "Read", "TaskCreate"),
        *("TaskList", "TodoWrite", "WebFetch", "Write", "Skill", "EnterWorktree", "ExitWorktree"),
    )
]


def claude_code_body(messages: list[dict[str, Any]], tools: list[Any]) -> dict[str, Any]:
    """What Claude Code 2.1.x sends for `ANTHROPIC_MODEL=default` (its fields, not its text)."""
    return {
        "model": "default",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
            {
                "type": "text",
                "text": "You are an interactive agent for software engineering tasks.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": messages,
        "tools": tools,
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": USER_ID},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stream": True,
    }


@pytest.fixture
def process_env(live_env: Path) -> Iterator[dict[str, str]]:
    """The environment of a `serve` process on agy-sim; afterwards no agy of it is left."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("AGY_PROVIDER_SERVE_TOKEN", None)
    yield env
    assert not leftovers(live_env)


class Lines(list[str]):
    """The log's lines as written; `wait_for(n)` returns once `n` request lines were (a line
    is written when its response has ended, after the client read the last byte)."""

    def __init__(self) -> None:
        super().__init__()
        self._written = asyncio.Event()

    def write(self, line: str) -> None:
        self.append(line)
        self._written.set()

    async def wait_for(self, count: int) -> list[str]:
        while len(request_lines(self)) < count:
            self._written.clear()
            await self._written.wait()
        return request_lines(self)


@pytest.fixture(name="logged")
async def logged_fixture(live_env: Path) -> AsyncIterator[tuple[Served, Lines]]:
    """A server with the request log at `-vv`, its lines collected."""
    lines = Lines()
    running, stop, task = await start_server(live_env, verbosity=2, log=lines.write)
    try:
        yield running, lines
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


def request_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if " headers: " not in line]


async def streamed(served: Served, body: dict[str, Any]) -> tuple[str, list[Any], Any]:
    """POST a Claude Code-shaped body as raw SSE (Claude Code's own client is the SDK's
    `beta.messages.create(stream=True)`); (text, tool_use blocks, the final message)."""
    client = served.anthropic()
    stream = await client.beta.messages.create(
        **{k: v for k, v in body.items() if k not in ("stream", "context_management")},
        stream=True,
        extra_body={"context_management": body["context_management"]},
        extra_headers={"anthropic-beta": BETAS, "x-claude-code-session-id": SESSION},
    )
    text = ""
    start = None
    blocks: dict[int, Any] = {}
    async for event in stream:
        if event.type == "message_start":
            start = event.message
        elif event.type == "content_block_start":
            blocks[event.index] = event.content_block
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
        elif event.type == "message_delta":
            stop = event.delta.stop_reason
    uses = [b for b in blocks.values() if b.type == "tool_use"]
    assert start is not None
    return text, uses, (start.model, stop)


async def test_a_claude_code_shaped_request_and_tool_round_trip(
    logged: tuple[Served, Lines], monkeypatch: pytest.MonkeyPatch
) -> None:
    served, lines = logged
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Where is my order A-1042?"}]},
        {"role": "system", "content": "Available agent types: claude, Explore."},
    ]
    tools = [*TOOLS, LOOKUP]
    assert len(json.dumps(tools)) > 60_000  # schemas as big as Claude Code's
    text, uses, (model, stop) = await streamed(served, claude_code_body(messages, tools))
    assert (model, stop) == ("default", "tool_use")
    (use,) = uses
    assert use.name == "lookup_order"
    # The streamed input arrives as JSON deltas; the arguments the scenario passes.
    messages += [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": use.id, "name": use.name, "input": tool_arguments()}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": tool_output("A-1042"),
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    text, uses, (model, stop) = await streamed(served, claude_code_body(messages, tools))
    assert (text, uses, stop) == (tool_answer(), [], "end_turn")
    first, second = await lines.wait_for(2)
    for line in (first, second):
        assert "POST /v1/messages model=default key=metadata.user_id.session_id" in line
        assert re.search(r" 200 first=\d+\.\d{3}s total=\d+\.\d{3}s tokens=\d+/\d+$", line)
    conversation = re.findall(r"conversation=(\S+) (\w+)", first)[0][0]
    assert re.findall(r"conversation=(\S+) (\w+)", first) == [(conversation, "new")]
    assert re.findall(r"conversation=(\S+) (\w+)", second) == [(conversation, "resumed")]
    headers = [line for line in lines if " headers: " in line]
    assert len(headers) == 2
    assert re.search(r" (authorization|x-api-key)=\*\*\* ", headers[0]), headers[0]
    assert f"anthropic-beta={BETAS}" in headers[0]
    assert not [line for line in lines if served.token in line]


async def test_client_model_names_are_mapped_and_said(
    logged: tuple[Served, Lines],
) -> None:
    served, lines = logged
    answer = scenario_answer("default")
    reply = await served.anthropic().messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "Hi"}],
    )
    assert reply.model == "claude-sonnet-4-6"  # agy-sim's Claude Sonnet
    assert [b.text for b in reply.content if b.type == "text"] == [answer]
    chat = await served.openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
    )
    assert (chat.model, chat.choices[0].message.content) == ("default", answer)
    unknown = await served.openai().chat.completions.create(
        model="gemini-9-nope", messages=[{"role": "user", "content": "Hi"}]
    )
    assert unknown.model == "default"  # the fallback
    logged_models = [re.findall(r"model=(\S+)", line)[0] for line in await lines.wait_for(3)]
    assert logged_models == [
        "claude-sonnet-4-5->claude-sonnet-4-6",
        "gpt-4o->default",
        "gemini-9-nope->default",
    ]
    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        ids = [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
    assert {"default", "claude-sonnet-4-6", "sonnet", "opus", "haiku", "gpt-5"} <= set(ids)


async def test_unknown_names_without_the_fallback_and_bad_images_are_client_errors(
    live_env: Path,
) -> None:
    served, stop, task = await start_server(live_env, model_map=(("*", "none"),))
    try:
        with pytest.raises(anthropic.NotFoundError) as refused:
            await served.anthropic().messages.create(
                model="gemini-9-nope", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
            )
        assert refused.value.body["error"]["type"] == "not_found_error"
        with pytest.raises(openai.NotFoundError):
            await served.openai().chat.completions.create(
                model="claude-sonnet-4-5", messages=[{"role": "user", "content": "Hi"}]
            )
        not_png = base64.b64encode(b"this is text, not a picture").decode()
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": not_png},
        }
        with pytest.raises(anthropic.BadRequestError, match="bytes are not"):
            await served.anthropic().messages.create(
                model="default",
                max_tokens=10,
                messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}],
            )
        # agy's own ids still answer.
        reply = await served.openai().chat.completions.create(
            model="gemini-3.7-flash", messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.choices[0].message.content == scenario_answer("default")
        # A catalog older than agy's own list names a model agy refuses: agy's "is not
        # available" is a 404 as well, never a 502.
        catalog = await served.server._model_ids()
        served.server._catalog = (time.monotonic(), [*catalog, "gemini-0-retired"])
        with pytest.raises(openai.NotFoundError, match="not available"):
            await served.openai().chat.completions.create(
                model="gemini-0-retired", messages=[{"role": "user", "content": "Hi"}]
            )
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


def test_serve_v_logs_a_line_per_request_and_no_token(
    process_env: dict[str, str],
) -> None:
    token = "serve-log-token-" + "q" * 24
    server = ServeProcess({**process_env, "AGY_PROVIDER_SERVE_TOKEN": token}, "-v")
    with httpx.Client(base_url=server.base, timeout=120) as http:
        assert http.head("/").status_code == 200
        assert http.post("/v1/messages", json={}, headers={"x-api-key": "wrong"}).status_code == 401
        ok = http.post(
            "/v1/chat/completions?note=1",
            json={
                "model": "default",
                "user": "log-test",
                "messages": [{"role": "user", "content": "Hi"}],
            },
            headers={"authorization": f"Bearer {token}"},
        )
        assert ok.status_code == 200
    code, printed = server.finish(signal.SIGTERM)
    assert code == 0, printed
    logged = [
        line for line in printed.splitlines() if re.search(r"\d\d:\d\d:\d\d 127\.0\.0\.1:", line)
    ]
    assert len(logged) == 3, printed
    head, refused, chat = logged
    assert " HEAD / " in head and " 200 " in head
    assert " POST /v1/messages " in refused and " 401 " in refused
    assert " POST /v1/chat/completions model=default key=user conversation=" in chat
    assert " new 200 " in chat and "note=1" not in chat  # never the query string
    assert token not in printed


async def test_a_continue_shaped_chat_continues_one_agy_conversation(
    logged: tuple[Served, Lines],
) -> None:
    """What Continue's `provider: openai` model entry sends (Continue is an IDE extension, so
    its shape, from its OpenAI adapter, through the real `openai` SDK): a streamed Chat
    Completions request with its own system message, `max_tokens`, `temperature`, `top_p`,
    `stop` and an `api-key` header beside the bearer token; no session key, so the resent
    transcript alone continues the conversation."""
    served, lines = logged
    client = served.openai()
    client = client.with_options(default_headers={"api-key": served.token})
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful coding assistant."},
        {"role": "user", "content": "Hi!"},
    ]
    for follow_up in ("Thanks, and again?", ""):
        stream = await client.chat.completions.create(
            model="default",
            messages=messages,
            stream=True,
            max_tokens=4096,
            temperature=0.5,
            top_p=1,
            stop=["<|endoftext|>"],
        )
        said = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert said == scenario_answer("default")
        if follow_up:
            messages += [
                {"role": "assistant", "content": said},
                {"role": "user", "content": follow_up},
            ]
    logged_lines = request_lines(await lines.wait_for(2))
    assert [re.findall(r"key=(\S+)", line)[0] for line in logged_lines] == ["transcript"] * 2
    assert " continued " in logged_lines[1], logged_lines
    assert len(conversations(served.app)) == 1
