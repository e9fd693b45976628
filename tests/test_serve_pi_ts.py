"""pi's provider suite held against `agy-provider serve`, through the real TypeScript pi-ai from npm
(`@mariozechner/pi-ai`, `tests/npm_clients.py`) over its `openai-completions` and
`anthropic-messages` APIs, with agy-sim as agy.

The behaviours are those pi-mono's `packages/ai/test` asks of every provider (streaming, thinking,
tool calls and results, images, aborts, usage, overflow, empty and unicode input, continuity),
written here as our own tests; where agy-sim cannot do what a model does (describe an image), the
test checks what shows agy got it. `tests/pi_ai_driver.mjs` drives pi-ai; the contexts and the
checks are here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import scenario_answer
from npm_clients import install
from npm_clients import node_bin
from pi_suite_texts import EMOJI
from pi_suite_texts import LONE_HIGH
from pi_ts_helpers import LOOKUP
from pi_ts_helpers import NOW
from pi_ts_helpers import TOOL_PROMPT
from pi_ts_helpers import calls
from pi_ts_helpers import text
from pi_ts_helpers import tool_result
from pi_ts_helpers import user
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

pytestmark = pytest.mark.slow

APIS = ["openai-completions", "anthropic-messages"]
DRIVER = Path(__file__).with_name("pi_ai_driver.mjs")


each_api = pytest.mark.parametrize("api", APIS)


# --- driving pi-ai -------------------------------------------------------------------------


class PiAi:
    """One node process running `pi_ai_driver.mjs`, a request per line."""

    def __init__(self, proc: subprocess.Popen[bytes], served: Served, api: str) -> None:
        self.proc, self.served, self.api = proc, served, api

    def model(self) -> dict[str, Any]:
        base = self.served.base + ("/v1" if self.api == "openai-completions" else "")
        return {
            "id": "default",
            "name": "agy via agy-provider serve",
            "api": self.api,
            "provider": "agy-serve",
            "baseUrl": base,
            "reasoning": True,
            "input": ["text", "image"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 1_000_000,
            "maxTokens": 8192,
        }

    async def turn(self, context: dict[str, Any], **options: Any) -> dict[str, Any]:
        """pi-ai's `streamSimple` on `context`: its events (no partials) and final message."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {
            "model": self.model(),
            "context": context,
            "options": {"apiKey": self.served.token, **options},
        }
        await asyncio.to_thread(self._send, json.dumps(request).encode() + b"\n")
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 240)
        assert line, "pi-ai's driver ended without answering"
        answer: dict[str, Any] = json.loads(line)
        assert "thrown" not in answer, answer["thrown"]
        return answer

    def _send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    async def complete(self, context: dict[str, Any], **options: Any) -> dict[str, Any]:
        message: dict[str, Any] = (await self.turn(context, **options))["message"]
        return message


@pytest.fixture(scope="module")
def pi_ai_folder() -> Path:
    folder = install("pi-ai")
    # ESM resolves packages from the script's own folder: the driver runs from the install.
    script = folder / DRIVER.name
    if not script.is_file() or script.read_bytes() != DRIVER.read_bytes():
        partial = folder / f".{DRIVER.name}.{os.getpid()}"
        partial.write_bytes(DRIVER.read_bytes())
        partial.replace(script)
    return folder


@pytest.fixture(scope="module")
def pi_driver(pi_ai_folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """One node process for the module (its start costs seconds); each test names its server."""
    proc = subprocess.Popen(
        [node_bin(), str(pi_ai_folder / DRIVER.name)],
        cwd=pi_ai_folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def pi(
    pi_driver: subprocess.Popen[bytes],
    served: Served,
    api: str,
    monkeypatch: pytest.MonkeyPatch,
) -> PiAi:
    monkeypatch.setenv("AGY_SIM_SPEED", "20")  # agy-sim's delays, fifty times shorter
    return PiAi(pi_driver, served, api)


# --- the contexts pi's suite builds ---------------------------------------------------------

ZERO_USAGE = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def foreign_assistant(api: str, content: list[dict[str, Any]], stop: str = "stop") -> Any:
    """An assistant message serve never wrote (pi builds these by hand, or another provider)."""
    return {
        "role": "assistant",
        "content": content,
        "api": api,
        "provider": "agy-serve",
        "model": "default",
        "usage": ZERO_USAGE,
        "stopReason": stop,
        "timestamp": NOW,
    }


def kinds(answer: dict[str, Any]) -> list[str]:
    return [e["type"] for e in answer["events"]]


def sums(usage: dict[str, Any]) -> bool:
    """pi's tokens rule: totalTokens is input + output + cacheRead + cacheWrite."""
    parts = usage["input"] + usage["output"] + usage["cacheRead"] + usage["cacheWrite"]
    return bool(usage["totalTokens"] == parts)


def handled(message: dict[str, Any]) -> None:
    """pi's "handled gracefully": an answer with content, or an error that says what failed."""
    assert message["role"] == "assistant"
    if message["stopReason"] == "error":
        assert message.get("errorMessage"), message
    else:
        assert message["content"], message


def red_circle_png(size: int = 24) -> bytes:
    """A small PNG of a red circle on white (pi's suite sends one), made here, byte for byte."""
    rows = b""
    centre, radius = (size - 1) / 2, size / 3
    for y in range(size):
        row = b"\x00"
        for x in range(size):
            inside = (x - centre) ** 2 + (y - centre) ** 2 <= radius**2
            row += b"\xff\x00\x00" if inside else b"\xff\xff\xff"
        rows += row

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = red_circle_png()
IMAGE = {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}


async def parked_lookup(pi: PiAi) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool scenario's first turn: agy calls `lookup_order` and the turn parks."""
    context: dict[str, Any] = {
        "systemPrompt": "You are helpful.",
        "messages": [user(TOOL_PROMPT)],
        "tools": [LOOKUP],
    }
    first = await pi.complete(context)
    assert first["stopReason"] == "toolUse", first
    context["messages"].append(first)
    return context, first


# --- stream.test.ts -------------------------------------------------------------------------


@each_api
async def test_basic_text_then_a_second_turn_in_the_same_conversation(
    pi: PiAi, served: Served
) -> None:
    context: dict[str, Any] = {
        "systemPrompt": "Be concise.",
        "messages": [user("Reply with a greeting")],
    }
    first = await pi.complete(context)
    assert (first["stopReason"], text(first)) == ("stop", scenario_answer("default")), first
    assert first["usage"]["input"] + first["usage"]["cacheRead"] > 0
    assert first["usage"]["output"] > 0 and not first.get("errorMessage")
    context["messages"] += [first, user("Now say goodbye")]
    second = await pi.complete(context)
    assert (second["stopReason"], text(second)) == ("stop", scenario_answer("default"))
    assert second["usage"]["output"] > 0
    assert len(conversations(served.app)) == 1  # the second turn continued agy's conversation


async def test_a_tool_call_streams_start_deltas_and_end(pi: PiAi) -> None:
    answer = await pi.turn({"messages": [user(TOOL_PROMPT)], "tools": [LOOKUP]})
    message = answer["message"]
    assert message["stopReason"] == "toolUse", message
    (call,) = calls(message)
    assert call["name"] == "lookup_order" and call["id"]
    assert call["arguments"] == tool_arguments()
    index = message["content"].index(call)
    events = [e for e in answer["events"] if e["type"].startswith("toolcall_")]
    seen = [e["type"] for e in events]
    assert (seen[0], seen[-1]) == ("toolcall_start", "toolcall_end")
    assert "toolcall_delta" in seen
    assert {e["contentIndex"] for e in events} == {index}
    streamed = "".join(e["delta"] for e in events if e["type"] == "toolcall_delta")
    assert json.loads(streamed) == tool_arguments()


async def test_text_streams_start_deltas_and_end(pi: PiAi) -> None:
    answer = await pi.turn({"messages": [user("Count from 1 to 3")]})
    seen = kinds(answer)
    assert {"text_start", "text_delta", "text_end"} <= set(seen)
    assert seen.index("text_start") < seen.index("text_delta") < seen.index("text_end")
    deltas = "".join(e["delta"] for e in answer["events"] if e["type"] == "text_delta")
    assert deltas == text(answer["message"]) == scenario_answer("default")


async def test_thinking_streams_start_deltas_and_end(pi: PiAi) -> None:
    answer = await pi.turn({"messages": [user("Think about 15 + 27")]}, reasoning="medium")
    message, seen = answer["message"], kinds(answer)
    assert message["stopReason"] == "stop", message
    assert {"thinking_start", "thinking_delta", "thinking_end"} <= set(seen)
    thought = "".join(e["delta"] for e in answer["events"] if e["type"] == "thinking_delta")
    assert thought and any(b["type"] == "thinking" for b in message["content"])


async def test_multi_turn_with_thinking_and_a_tool_resumes_one_agy_turn(
    pi: PiAi, served: Served
) -> None:
    context, first = await parked_lookup(pi)
    (call,) = calls(first)
    output = tool_output(call["arguments"]["order_id"])
    context["messages"].append(
        tool_result(call["id"], call["name"], [{"type": "text", "text": output}])
    )
    second = await pi.complete(context)
    assert (second["stopReason"], text(second)) == ("stop", tool_answer()), second
    assert any(b["type"] == "thinking" for b in first["content"] + second["content"])
    assert len(conversations(served.app)) == 1  # the parked agy turn was resumed


async def test_a_tool_error_result_reaches_agy_and_the_turn_answers(
    pi: PiAi, served: Served
) -> None:
    context, first = await parked_lookup(pi)
    (call,) = calls(first)
    failed = {**tool_result(call["id"], call["name"], [{"type": "text", "text": "unreachable"}])}
    context["messages"].append({**failed, "isError": True})
    second = await pi.complete(context)
    assert second["stopReason"] == "stop", second
    prefix = scenario_answer("mcp-host-tool").split("{mcp_result}")[0]
    assert text(second).startswith(prefix) and "unreachable" in text(second), text(second)
    assert len(conversations(served.app)) == 1


async def test_an_image_in_the_prompt_reaches_agy(pi: PiAi) -> None:
    prompt = [{"type": "text", "text": "What do you see? [agy-sim:view-image]"}, IMAGE]
    message = await pi.complete({"messages": [user(prompt)]})
    assert message["stopReason"] == "stop", message
    # agy-sim cannot see red circles; it names the bytes it viewed, which shows agy got them.
    assert f"{len(PNG)} bytes" in text(message), text(message)


# --- abort.test.ts and tokens.test.ts -------------------------------------------------------


async def test_an_abort_mid_stream_keeps_what_came_and_the_next_turn_answers(pi: PiAi) -> None:
    # `hang` answers part, then stays silent: the abort always lands mid-turn.
    context: dict[str, Any] = {"messages": [user("List 50 first names. [agy-sim:hang]")]}
    aborted = await pi.complete(context, abortAfterChars=1)
    assert aborted["stopReason"] == "aborted", aborted
    assert len(aborted["content"]) > 0
    context["messages"] += [
        aborted,
        user("Please continue, but only generate 5 names. [agy-sim:default]"),
    ]
    follow = await pi.complete(context)
    assert follow["stopReason"] == "stop" and follow["content"], follow


async def test_an_abort_before_the_request_is_aborted(pi: PiAi) -> None:
    message = await pi.complete({"messages": [user("Hello")]}, abortBefore=True)
    assert message["stopReason"] == "aborted"


async def test_an_abort_before_the_request_then_a_new_message(pi: PiAi) -> None:
    context: dict[str, Any] = {"messages": [user("Hello, how are you?")]}
    aborted = await pi.complete(context, abortBefore=True)
    assert aborted["stopReason"] == "aborted" and aborted["content"] == []
    context["messages"] += [aborted, user("What is 2 + 2?")]
    follow = await pi.complete(context)
    assert (follow["stopReason"], text(follow)) == ("stop", scenario_answer("default")), follow


@each_api
async def test_usage_is_counted_on_an_abort_where_the_api_streams_it_early(pi: PiAi) -> None:
    message = await pi.complete(
        {"messages": [user("Write a long poem. [agy-sim:hang]")]}, abortAfterChars=1
    )
    assert message["stopReason"] == "aborted", message
    assert sums(message["usage"])
    if pi.api == "anthropic-messages":  # Messages streams usage from `message_start` on
        assert message["usage"]["input"] > 0 and message["usage"]["output"] > 0, message


# --- empty.test.ts --------------------------------------------------------------------------


@pytest.mark.parametrize("content", [[], "", "   \n\t  "], ids=["no-blocks", "empty", "blank"])
async def test_empty_or_blank_user_content_is_handled(pi: PiAi, content: Any) -> None:
    handled(await pi.complete({"messages": [user(content)]}))


async def test_an_empty_assistant_message_in_the_history_still_gets_an_answer(pi: PiAi) -> None:
    empty = foreign_assistant(pi.api, [])
    context: dict[str, Any] = {
        "messages": [user("Hello, how are you?"), empty, user("Please respond this time.")]
    }
    message = await pi.complete(context)
    handled(message)
    assert (message["stopReason"], text(message)) == ("stop", scenario_answer("default"))


# --- context-overflow.test.ts ---------------------------------------------------------------


@each_api
async def test_a_context_over_the_window_is_an_error_pi_classifies_as_overflow(pi: PiAi) -> None:
    # About 2.4 million tokens of text (four characters a token): past any agy model's window.
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 170_000
    answer = await pi.turn({"messages": [user(filler + "\nSummarise that.")]})
    message = answer["message"]
    assert message["stopReason"] == "error", message["stopReason"]
    assert answer["overflow"], message.get("errorMessage")  # pi's isContextOverflow


# --- image-tool-result.test.ts, openai-completions-tool-result-images.test.ts ---------------


@each_api
@pytest.mark.parametrize("with_text", [False, True], ids=["image-only", "text-and-image"])
async def test_an_image_in_a_tool_result_resumes_the_parked_turn(
    pi: PiAi, served: Served, with_text: bool
) -> None:
    context, first = await parked_lookup(pi)
    (call,) = calls(first)
    said = tool_output(call["arguments"]["order_id"])
    content = [{"type": "text", "text": said}, IMAGE] if with_text else [IMAGE]
    context["messages"].append(tool_result(call["id"], call["name"], content))
    second = await pi.complete(context)
    assert second["stopReason"] == "stop" and not second.get("errorMessage"), second
    prefix = scenario_answer("mcp-host-tool").split("{mcp_result}")[0]
    assert text(second).startswith(prefix), text(second)
    if with_text:
        assert said in text(second)
    assert len(conversations(served.app)) == 1  # the parked agy turn got the result


@each_api
async def test_a_tool_result_followed_by_user_text_resumes_the_parked_turn(
    pi: PiAi, served: Served
) -> None:
    context, first = await parked_lookup(pi)
    (call,) = calls(first)
    output = tool_output(call["arguments"]["order_id"])
    context["messages"] += [
        tool_result(call["id"], call["name"], [{"type": "text", "text": output}]),
        user("And thank you."),
    ]
    second = await pi.complete(context)
    # The parked turn went on (one conversation) with the result, the user's words beside it
    # (agy-sim's answer quotes what the tool call returned).
    assert second["stopReason"] == "stop", second
    assert text(second).startswith(tool_answer().removesuffix(".")), second
    assert "And thank you." in text(second), second
    assert len(conversations(served.app)) == 1


# --- total-tokens.test.ts -------------------------------------------------------------------


async def test_total_tokens_is_the_sum_of_the_counters_on_every_turn(pi: PiAi) -> None:
    system = "You are a helpful assistant. " + "Answer briefly and precisely. " * 400
    context: dict[str, Any] = {"systemPrompt": system, "messages": [user("What is 2 + 2?")]}
    first = await pi.complete(context)
    context["messages"] += [first, user("What is 3 + 3?")]
    second = await pi.complete(context)
    for message in (first, second):
        assert message["stopReason"] == "stop", message
        assert message["usage"]["totalTokens"] > 0 and sums(message["usage"])


# --- tool-call-without-result.test.ts -------------------------------------------------------


async def test_a_tool_call_left_without_its_result_does_not_fail_the_next_turn(
    pi: PiAi,
) -> None:
    context, _ = await parked_lookup(pi)
    context["messages"].append(user("Never mind, just tell me what is 2+2?"))
    second = await pi.complete(context)
    assert second["stopReason"] in ("stop", "toolUse"), second
    assert text(second) or calls(second)


# --- unicode-surrogate.test.ts --------------------------------------------------------------

LINKEDIN = (
    "Mario Zechner commented: Thanks! 🙏 Great work on this 🚀\n"
    "Anna Müller: Wirklich großartig 👏👏 — danke für's Teilen!\n"
    "李雷: 太棒了 🎉 | Ólafur: Frábært ✨ | مريم: رائع 🌟"
)


@pytest.mark.parametrize(
    "said",
    [EMOJI, LINKEDIN, f"Text with {LONE_HIGH} in it"],
    ids=["emoji", "linkedin", "lone-surrogate"],
)
async def test_unicode_in_tool_results_gets_an_answer(pi: PiAi, said: str) -> None:
    test_tool = {
        "name": "test_tool",
        "description": "A test tool",
        "parameters": {"type": "object", "properties": {}},
    }
    call = {"type": "toolCall", "id": "test_1", "name": "test_tool", "arguments": {}}
    context: dict[str, Any] = {
        "systemPrompt": "You are a helpful assistant.",
        "messages": [
            user("Use the test tool"),
            foreign_assistant(pi.api, [call], "toolUse"),
            tool_result("test_1", "test_tool", [{"type": "text", "text": said}]),
            user("Summarize the tool result briefly."),
        ],
        "tools": [test_tool],
    }
    message = await pi.complete(context)
    assert (message["stopReason"], text(message)) == ("stop", scenario_answer("default")), message


# --- cross-provider-handoff.test.ts ---------------------------------------------------------


async def test_a_transcript_from_another_provider_gets_an_answer_in_a_new_conversation(
    pi: PiAi, served: Served
) -> None:
    # Another provider's answer: thinking with its own signature and a tool call with its id.
    thinking = {
        "type": "thinking",
        "thinking": "Let me look that up.",
        "thinkingSignature": "c2lnbmVkIGJ5IHNvbWVvbmUgZWxzZQ==",
    }
    call = {
        "type": "toolCall",
        "id": "call_abc|fc_123",
        "name": "lookup_order",
        "arguments": {"order_id": "A-7"},
    }
    elsewhere = {
        **foreign_assistant("openai-responses", [thinking, call], "toolUse"),
        "provider": "openai",
        "model": "gpt-5",
    }
    context: dict[str, Any] = {
        "messages": [
            user("Where is order A-7?"),
            elsewhere,
            tool_result(
                "call_abc|fc_123", "lookup_order", [{"type": "text", "text": tool_output("A-7")}]
            ),
            user("Thanks. Anything else?"),
        ],
        "tools": [LOOKUP],
    }
    message = await pi.complete(context)
    assert (message["stopReason"], text(message)) == ("stop", scenario_answer("default")), message
    assert len(conversations(served.app)) == 1  # one agy conversation carrying that history
