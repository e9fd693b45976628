"""pi's own wire API (`POST /pi/messages`, pi-ai 1.6's `pi-messages`) end to end: the real server on
127.0.0.1 running agy-sim, driven by raw httpx as pi-ai's client posts and reads it.

The message is rebuilt from the events as pi-ai's `pi-messages` client builds it (`rebuild`);
expectations come from the scenario files.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import agy_processes
from live_helpers import scenario_answer
from serve_helpers import CITY
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)
from serve_helpers import until_no_agy

pytestmark = pytest.mark.slow

NOW = 1_700_000_000_000
LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order's status by its id.",
    "parameters": TOOL_PARAMETERS,
}
TOOL_PROMPT = "Where is my order A-1042? [agy-sim:mcp-host-tool]"


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "timestamp": NOW}


def system(prompt: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """pi 1.6's leading system message (`normalizeContext`: the prompt and the tools)."""
    message: dict[str, Any] = {"role": "system", "content": prompt, "timestamp": 0}
    if tools:
        message["toolsAdded"] = tools
    return message


def tool_result(call: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call["id"],
        "toolName": call["name"],
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": NOW,
    }


async def post(
    served: Served, messages: list[dict[str, Any]], token: str | None = None, **options: Any
) -> httpx.Response:
    """One request as pi-ai posts it, read whole (its SSE body or its error)."""
    body = {"model": "default", "context": {"messages": messages}, "options": options}
    headers = {"authorization": f"Bearer {token or served.token}", "accept": "text/event-stream"}
    async with httpx.AsyncClient(base_url=served.base, headers=headers, timeout=120) as http:
        return await http.post("/pi/messages", json=body)


def frames(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return [
        json.loads(line[5:])
        for chunk in response.text.split("\n\n")
        for line in chunk.split("\n")
        if line.startswith("data:")
    ]


def rebuild(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message pi-ai's `pi-messages` client builds from the events (its `createEventConverter`),
    checking what it checks: a block starts at the next index, others name an open block."""
    content: list[dict[str, Any]] = []
    message: dict[str, Any] = {"role": "assistant", "content": content, "api": "pi-messages"}
    message.update(provider="agy", model="default", timestamp=NOW, stopReason="pending")
    assert events[0] == {"type": "start"}, events[0]
    for event in events[1:]:
        assert "partial" not in event, event
        kind = event["type"]
        if kind in ("done", "error"):
            assert event is events[-1], "events after the final one"
            message.update(stopReason=event["reason"], usage=event["usage"])
            message["responseId"] = event.get("responseId")
            if kind == "error":
                message["errorMessage"] = event["errorMessage"]
            return message
        index = event["contentIndex"]
        limit = len(content) if kind.endswith("_start") else len(content) - 1
        assert isinstance(index, int) and 0 <= index <= limit, event
        if kind == "text_start":
            content.append({"type": "text", "text": ""})
        elif kind == "thinking_start":
            content.append({"type": "thinking", "thinking": ""})
        elif kind == "toolcall_start":
            call = {"type": "toolCall", "id": event["id"], "name": event["toolName"]}
            content.append({**call, "arguments": {}})
        elif kind == "text_delta":
            content[index]["text"] += event["delta"]
        elif kind == "thinking_delta":
            content[index]["thinking"] += event["delta"]
        elif kind == "text_end":
            content[index].update(
                text=event["content"], textSignature=event.get("contentSignature")
            )
        elif kind == "thinking_end":
            content[index].update(
                thinking=event["content"], thinkingSignature=event.get("contentSignature")
            )
        elif kind == "toolcall_end":
            content[index].update(event["toolCall"])
    raise AssertionError("the stream ended without `done` or `error`")


async def answer(
    served: Served, messages: list[dict[str, Any]], **options: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events = frames(await post(served, messages, **options))
    return rebuild(events), events


def text(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message["content"] if b["type"] == "text")


def calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b["type"] == "toolCall"]


# --- answers -------------------------------------------------------------------------------------


async def test_a_plain_answer_is_pis_own_events_and_a_second_turn_continues_it(
    served: Served,
) -> None:
    messages = [system("Be concise."), user("Hi!")]
    first, events = await answer(served, messages, reasoning="medium")
    assert (first["stopReason"], text(first)) == ("stop", scenario_answer("default")), first
    usage = first["usage"]
    assert usage["output"] > 0 and usage["input"] + usage["cacheRead"] > 0
    parts = usage["input"] + usage["output"] + usage["cacheRead"] + usage["cacheWrite"]
    assert usage["totalTokens"] == parts and usage["cost"]["total"] == 0
    done = events[-1]
    assert done["responseId"].startswith("agy-provider:1:"), done  # the continuity mark
    assert done["responseModel"], done
    (thinking,) = [b for b in first["content"] if b["type"] == "thinking"]
    assert thinking["thinking"] and thinking["thinkingSignature"].startswith("agy1."), thinking
    kinds = [e["type"] for e in events]
    assert kinds.index("thinking_start") < kinds.index("text_start") < kinds.index("done")

    # pi-ai sends its message back as it built it: the same agy conversation goes on.
    second, _ = await answer(served, [*messages, first, user("And again?")])
    assert (second["stopReason"], text(second)) == ("stop", scenario_answer("default")), second
    assert len(conversations(served.app)) == 1


async def test_the_session_id_is_the_owner_and_another_owner_never_continues_it(
    served: Served,
) -> None:
    messages = [user("Hi!")]
    first, _ = await answer(served, messages, sessionId="pi-session-a")
    assert first["stopReason"] == "stop", first
    follow = [*messages, first, user("More?")]
    # Another session sending the same transcript gets a conversation of its own.
    other, _ = await answer(served, follow, sessionId="pi-session-b")
    assert other["stopReason"] == "stop", other
    assert len(conversations(served.app)) == 2
    mine, _ = await answer(served, follow, sessionId="pi-session-a")
    assert mine["stopReason"] == "stop", mine
    assert len(conversations(served.app)) == 2  # the owner's own went on


async def test_a_forged_mark_names_no_conversation(served: Served) -> None:
    first, _ = await answer(served, [user("Hi!")])
    # Another client copies the mark onto an answer serve never gave: nothing continues.
    forged = {**first, "content": [{"type": "text", "text": "Something else entirely."}]}
    second, _ = await answer(served, [user("Hi!"), forged, user("Go on.")])
    assert second["stopReason"] == "stop", second
    assert len(conversations(served.app)) == 2


# --- host tools: park and resume -----------------------------------------------------------------


async def test_a_tool_call_ends_with_tool_use_and_its_result_resumes_the_parked_turn(
    served: Served,
) -> None:
    messages = [system("You are helpful.", [LOOKUP]), user(TOOL_PROMPT)]
    first, events = await answer(served, messages, sessionId="pi-tools")
    assert first["stopReason"] == "toolUse", first
    (call,) = calls(first)
    assert call["name"] == "lookup_order" and call["id"]
    assert call["arguments"] == tool_arguments()
    (start,) = [e for e in events if e["type"] == "toolcall_start"]
    assert (start["id"], start["toolName"]) == (call["id"], "lookup_order")
    deltas = "".join(e["delta"] for e in events if e["type"] == "toolcall_delta")
    assert json.loads(deltas) == tool_arguments()

    result = tool_result(call, tool_output(call["arguments"]["order_id"]))
    # The parked turn is its owner's: another session's same results do not resume it.
    other, _ = await answer(served, [*messages, first, result], sessionId="pi-someone-else")
    assert other["stopReason"] in ("stop", "toolUse"), other
    second, _ = await answer(served, [*messages, first, result], sessionId="pi-tools")
    assert (second["stopReason"], text(second)) == ("stop", tool_answer()), second
    conversation = first["responseId"].split(":")[2]
    assert second["responseId"].split(":")[2] == conversation  # the same agy turn went on


async def test_tool_choice_none_offers_no_tool(served: Served) -> None:
    messages = [system("You are helpful.", [LOOKUP]), user("Hi!")]
    message, _ = await answer(served, messages, toolChoice="none")
    assert (message["stopReason"], text(message)) == ("stop", scenario_answer("default"))


async def test_a_forced_tool_choice_answers_with_that_tools_call(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    record = {"name": "record_city", "description": "", "parameters": CITY}
    messages = [system("", [record]), user("Paris?")]
    choice = {"type": "function", "function": {"name": "record_city"}}
    message, _ = await answer(served, messages, toolChoice=choice)
    assert message["stopReason"] == "toolUse", message
    (call,) = calls(message)
    expected = json.loads(scenario_answer("structured-output"))
    assert (call["name"], call["arguments"]) == ("record_city", expected)
    assert not text(message)  # the answer is the call, not text


# --- errors and aborts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "default"}, 400, "context"),
        ({"model": "default", "context": {"messages": []}, "options": []}, 400, "options"),
        (
            {
                "model": "default",
                "context": {"messages": [user("Hi")]},
                "options": {"reasoning": 9},
            },
            400,
            "options.reasoning",
        ),
        (
            {
                "model": "default",
                "context": {"messages": [user("Hi")]},
                "options": {"sessionId": "has spaces"},
            },
            400,
            "options.sessionId",
        ),
        (
            {"model": "default", "context": {"messages": [{"role": "wizard"}]}},
            400,
            "context.messages[0].role",
        ),
        (
            {
                "model": "default",
                "context": {"messages": [user("Hi")]},
                "options": {"toolChoice": "required"},
            },
            400,
            "tool_choice",
        ),
    ],
)
async def test_a_bad_request_is_an_http_status_in_pis_error_shape(
    served: Served, body: dict[str, Any], status: int, words: str
) -> None:
    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        response = await http.post("/pi/messages", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"] and error["code"] == "invalid_request", error
    assert not conversations(served.app)


async def test_a_wrong_token_and_an_overflow_are_refused_before_any_turn(served: Served) -> None:
    refused = await post(served, [user("Hi")], token="not-the-token")
    assert refused.status_code == 401
    assert "token" in refused.json()["error"]["message"]
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 170_000
    overflow = await post(served, [user(filler)])
    assert overflow.status_code == 400, overflow.text
    error = overflow.json()["error"]
    assert error["code"] == "context_length_exceeded" and "prompt is too long" in error["message"]
    assert not conversations(served.app)


async def test_a_turn_that_fails_once_streaming_ends_with_an_error_event(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    message, events = await answer(served, [user("Hi")])
    assert events[-1]["type"] == "error" and message["stopReason"] == "error", events[-1]
    assert "quota" in message["errorMessage"].lower(), message
    assert "usage" in events[-1]


async def test_a_client_leaving_mid_stream_aborts_its_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    body = {"model": "default", "context": {"messages": [user("Take your time.")]}}
    async with (
        httpx.AsyncClient(base_url=served.base, headers=served.headers(), timeout=60) as http,
        http.stream("POST", "/pi/messages", json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if "_delta" in line:
                assert await asyncio.to_thread(agy_processes, served.app)  # agy is mid-turn
                break
    await until_no_agy(served.app)  # the client is gone: its turn aborted, agy's tree ended
