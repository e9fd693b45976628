"""serve's ownership rule and pi's provider defects end to end: the real server on agy-sim, the
real `openai` and `anthropic` SDKs (and raw httpx where a client is hostile).

Hostile clients — another key replaying a transcript, a forged session header with another key,
a foreign transcript ending in a parked call id, a forged thinking signature — continue or
resume nothing they do not own. Then: signed thinking continues its conversation, images in
tool results reach agy, a tool result followed by user text resumes the parked turn with both,
an over-long context is the error clients read as overflow, `count_tokens`, and usage in
`message_start`.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import httpx
import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_output
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)

from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.tokens import DEFAULT_CONTEXT_WINDOW
from agy_provider.hosts.serve.tokens import estimate_context

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai", reason="the serve extra is not installed")
anthropic = pytest.importorskip("anthropic", reason="the serve extra is not installed")

LOOKUP_OPENAI = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order.",
        "parameters": TOOL_PARAMETERS,
    },
}
LOOKUP_ANTHROPIC = {
    "name": "lookup_order",
    "description": "Look up an order.",
    "input_schema": TOOL_PARAMETERS,
}
COUNT = [{"role": "user", "content": "Count with me."}]


def png(width: int = 2, height: int = 2) -> bytes:
    """A real, small PNG (grey pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PICTURE = png()
PICTURE_B64 = base64.b64encode(PICTURE).decode()
IMAGE_SEEN = f"[image image/png, {len(PICTURE)} bytes]"


def watch_turns(served: Served) -> list[Any]:
    """Every `RunningTurn` the server starts, in order (what the request log reads)."""
    started: list[Any] = []
    start = served.server.turns.start

    def recording(*args: Any, **kwargs: Any) -> Any:
        turn = start(*args, **kwargs)
        started.append(turn)
        return turn

    served.server.turns.start = recording  # type: ignore[method-assign]
    return started


def told(turns: list[Any]) -> list[tuple[str, str]]:
    return [(t.key_source, t.continuity) for t in turns]


async def count_turn_one(client: Any, **extra: Any) -> Any:
    one = await client.chat.completions.create(model="default", messages=COUNT, **extra)
    assert one.choices[0].message.content == scenario_answer("two-turn", 0)
    return [*COUNT, {"role": "assistant", "content": one.choices[0].message.content}]


# --- hostile clients ---------------------------------------------------------------------------


async def test_another_key_replaying_a_transcript_gets_a_conversation_of_its_own(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    turns = watch_turns(served)
    history = await count_turn_one(client, user="alice")
    go_on = [*history, {"role": "user", "content": "Go on."}]
    stolen = await client.chat.completions.create(model="default", messages=go_on, user="mallory")
    # A new conversation carrying the history: agy's first turn, not alice's second.
    assert stolen.choices[0].message.content == scenario_answer("two-turn", 0)
    assert len(conversations(served.app)) == 2
    own = await client.chat.completions.create(model="default", messages=go_on, user="alice")
    assert own.choices[0].message.content == scenario_answer("two-turn", 1)  # untouched
    assert len(conversations(served.app)) == 2
    assert told(turns) == [("user", "new"), ("user", "new"), ("user", "continued")]


async def test_a_forged_session_header_with_another_key_continues_nothing(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    session = {"X-Claude-Code-Session-Id": "5f0c7c1e-1111-2222-3333-444455556666"}
    history = await count_turn_one(client, extra_headers=session)
    go_on = [*history, {"role": "user", "content": "Go on."}]
    forged = await client.chat.completions.create(
        model="default", messages=go_on, user="mallory", extra_headers=session
    )
    assert forged.choices[0].message.content == scenario_answer("two-turn", 0)
    own = await client.chat.completions.create(
        model="default", messages=go_on, extra_headers=session
    )
    assert own.choices[0].message.content == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 2


async def test_a_foreign_transcript_ending_in_a_parked_call_id_resumes_nothing(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    client = served.openai()
    turns = watch_turns(served)
    ask = [{"role": "user", "content": "Where is my order A-1042?"}]
    first = await client.chat.completions.create(
        model="default", messages=ask, tools=[LOOKUP_OPENAI], user="alice"
    )
    (call,) = first.choices[0].message.tool_calls or []
    answered = [
        *ask,
        first.choices[0].message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": "order A-1042 was cancelled"},
    ]
    for hostile in ({"user": "mallory"}, {}):  # another key, and no key at all
        stolen = await client.chat.completions.create(
            model="default", messages=answered, tools=[LOOKUP_OPENAI], **hostile
        )
        # Not alice's parked turn: a new conversation of its own, which calls the tool anew.
        assert stolen.choices[0].finish_reason == "tool_calls"
        (again,) = stolen.choices[0].message.tool_calls or []
        assert again.id != call.id
    answered[-1] = {"role": "tool", "tool_call_id": call.id, "content": tool_output("A-1042")}
    own = await client.chat.completions.create(
        model="default", messages=answered, tools=[LOOKUP_OPENAI], user="alice"
    )
    assert own.choices[0].message.content == tool_answer()  # alice's turn, resumed by her
    assert len(conversations(served.app)) == 3
    assert told(turns) == [
        ("user", "new"),
        ("user", "new"),
        ("transcript", "new"),
        ("user", "resumed"),
    ]


async def test_a_forged_thinking_signature_continues_nothing_and_a_real_one_does(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.anthropic()
    async with client.messages.stream(model="default", max_tokens=64, messages=COUNT) as stream:
        one = await stream.get_final_message()
    (thinking,) = [b for b in one.content if b.type == "thinking"]
    assert thinking.signature  # streamed thinking is signed (pi keeps thinking so)
    blocks = [b.model_dump() for b in one.content]
    go_on = {"role": "user", "content": "Go on."}
    forged_blocks = [
        {**b, "signature": "agy1.forged"} if b["type"] == "thinking" else b for b in blocks
    ]
    edited_blocks = [
        {**b, "thinking": b["thinking"] + " Edited."} if b["type"] == "thinking" else b
        for b in blocks
    ]
    for resent in (forged_blocks, edited_blocks):
        forged = await client.messages.create(
            model="default",
            max_tokens=64,
            messages=[*COUNT, {"role": "assistant", "content": resent}, go_on],
        )
        assert forged.content[-1].text == scenario_answer("two-turn", 0)
    two = await client.messages.create(
        model="default",
        max_tokens=64,
        messages=[*COUNT, {"role": "assistant", "content": blocks}, go_on],
    )
    assert two.content[-1].text == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 3


async def test_a_side_request_leaves_the_main_line_its_conversation(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    main_system = {"role": "system", "content": "You are a coding agent."}
    one = await client.chat.completions.create(model="default", messages=[main_system, *COUNT])
    history = [*COUNT, {"role": "assistant", "content": one.choices[0].message.content}]
    # Qwen Code's memory request: the transcript plus one more user message, another system.
    side = await client.chat.completions.create(
        model="default",
        messages=[
            {"role": "system", "content": "Extract facts worth remembering."},
            *history,
            {"role": "user", "content": "What should be remembered?"},
        ],
    )
    assert side.choices[0].message.content == scenario_answer("two-turn", 0)
    main = await client.chat.completions.create(
        model="default",
        messages=[main_system, *history, {"role": "user", "content": "Go on."}],
    )
    assert main.choices[0].message.content == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 2


# --- pi's provider defects ---------------------------------------------------------------------


async def test_a_tool_result_then_user_text_with_an_image_resumes_the_parked_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    client = served.openai()
    ask = [{"role": "user", "content": "Where is my order A-1042?"}]
    first = await client.chat.completions.create(
        model="default", messages=ask, tools=[LOOKUP_OPENAI]
    )
    (call,) = first.choices[0].message.tool_calls or []
    # pi's openai-completions shape for a tool result with an image: the tool message's text,
    # then a user message carrying the image.
    after = [
        *ask,
        first.choices[0].message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": tool_output("A-1042")},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attached image(s) from tool result:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE_B64}"}},
            ],
        },
    ]
    second = await client.chat.completions.create(
        model="default", messages=after, tools=[LOOKUP_OPENAI]
    )
    text = second.choices[0].message.content or ""
    assert tool_output("A-1042") in text and "Attached image(s) from tool result:" in text
    assert IMAGE_SEEN in text  # the image went to agy with the result
    assert len(conversations(served.app)) == 1  # the same agy turn, resumed with both


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_an_image_in_a_tool_result_reaches_agy(
    served: Served, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    ask: list[dict[str, Any]] = [{"role": "user", "content": "Where is my order A-1042?"}]
    if api == "anthropic":
        client = served.anthropic()
        first = await client.messages.create(
            model="default", max_tokens=256, messages=ask, tools=[LOOKUP_ANTHROPIC]
        )
        (use,) = [b for b in first.content if b.type == "tool_use"]
        image = {"type": "base64", "media_type": "image/png", "data": PICTURE_B64}
        result = {
            "type": "tool_result",
            "tool_use_id": use.id,
            "content": [
                {"type": "text", "text": tool_output("A-1042")},
                {"type": "image", "source": image},
            ],
        }
        messages = [
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [result]},
        ]
        final = await client.messages.create(
            model="default", max_tokens=256, messages=messages, tools=[LOOKUP_ANTHROPIC]
        )
        text = "".join(b.text for b in final.content if b.type == "text")
    else:
        oai = served.openai()
        first_oai = await oai.chat.completions.create(
            model="default", messages=ask, tools=[LOOKUP_OPENAI]
        )
        (call,) = first_oai.choices[0].message.tool_calls or []
        parts = [
            {"type": "text", "text": tool_output("A-1042")},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE_B64}"}},
        ]
        messages = [
            *ask,
            first_oai.choices[0].message.model_dump(
                exclude_none=True, exclude={"reasoning_content"}
            ),
            {"role": "tool", "tool_call_id": call.id, "content": parts},
        ]
        done = await oai.chat.completions.create(
            model="default", messages=messages, tools=[LOOKUP_OPENAI]
        )
        text = done.choices[0].message.content or ""
    assert tool_output("A-1042") in text and IMAGE_SEEN in text
    assert len(conversations(served.app)) == 1


def overflowing(window: int) -> str:
    """pi's own overflow probe: lorem ipsum of (window + 10,000) × 6 characters."""
    lorem = (
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. Sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
        "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. "
    )
    return lorem * ((window + 10_000) * 6 // len(lorem) + 1)


async def test_an_over_long_context_is_the_error_clients_read_as_overflow(
    served: Served,
) -> None:
    text = overflowing(DEFAULT_CONTEXT_WINDOW)
    messages = [{"role": "user", "content": text}]
    with pytest.raises(anthropic.BadRequestError) as anthropic_caught:
        await served.anthropic().messages.create(model="default", max_tokens=64, messages=messages)
    error = anthropic_caught.value.body["error"]
    assert error["type"] == "invalid_request_error"
    tokens, maximum = error["message"].removeprefix("prompt is too long: ").split(" tokens > ")
    assert int(tokens) > DEFAULT_CONTEXT_WINDOW and maximum == f"{DEFAULT_CONTEXT_WINDOW} maximum"
    with pytest.raises(openai.BadRequestError) as openai_caught:
        await served.openai().chat.completions.create(model="default", messages=messages)
    assert openai_caught.value.code == "context_length_exceeded"
    assert "exceeds the context window" in openai_caught.value.message
    assert not conversations(served.app)  # no turn started


async def test_count_tokens_and_usage_in_message_start(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    body: dict[str, Any] = {
        "model": "default",
        "system": "Be brief.",
        "messages": COUNT,
        "tools": [LOOKUP_ANTHROPIC],
    }
    counted = await served.anthropic().messages.count_tokens(**body)
    assert counted.input_tokens == estimate_context(anthropic_ask(body).context) > 0
    frames: list[tuple[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=served.base, headers=served.headers(), timeout=60) as http,
        http.stream(
            "POST", "/v1/messages", json={**body, "max_tokens": 64, "stream": True}
        ) as response,
    ):
        name = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                frames.append((name, json.loads(line.removeprefix("data: "))))
                if name == "message_delta" and any(f[0] == "content_block_stop" for f in frames):
                    break  # the client aborts after its first block
    start = frames[0][1]["message"]["usage"]
    assert start["input_tokens"] == counted.input_tokens
    # What the client held when it left: the thinking block, signed, and the usage so far.
    assert any(f[1].get("delta", {}).get("type") == "signature_delta" for f in frames)
    (name, delta) = frames[-1]
    assert delta["delta"]["stop_reason"] is None
    assert delta["usage"]["input_tokens"] == counted.input_tokens
    assert delta["usage"]["output_tokens"] > 0
