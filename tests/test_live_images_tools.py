"""An image and host tools in one turn, warm pool on or off: agy sees the image and reaches the
host's tool in the same turn (issue 29, item 5).

A turn with images runs its own agy (their folder is one more `--add-dir`); with the warm pool
on, its host tools must then be served by that agy's own bridge, not prepared for a warm agy's.
agy-sim views each staged file the prompt names (`sim/image_views.py`) and, in scenario
`mcp-host-tool`, calls the host tool through the MCP config of its `--add-dir` roots.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from image_helpers import image
from image_helpers import png
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import leftovers
from live_helpers import scenario_answer

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow

LOOKUP = Tool("lookup_order", "Look up an order's status by its id.", TOOL_PARAMETERS)


@pytest.mark.parametrize("tools", [True, False], ids=["tools", "no-tools"])
@pytest.mark.parametrize("with_image", [True, False], ids=["image", "no-image"])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "one-shot"])
async def test_one_turn_reaches_the_host_tool_and_sees_the_image(
    live_env: Path,
    recorder: Any,
    monkeypatch: pytest.MonkeyPatch,
    warm: bool,
    with_image: bool,
    tools: bool,
) -> None:
    monkeypatch.setenv("AGY_WARM", "1" if warm else "0")
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO if tools else "default")
    picture = png(3, 2)
    blocks: list[Any] = [TextContent(text="Where is my order A-1042?")]
    if with_image:
        blocks.append(image(picture, "image/png"))
    calls: list[ToolCall] = []

    async def execute(call: ToolCall) -> str:
        calls.append(call)
        return tool_output("A-1042")

    context = Context(
        messages=[UserMessage(content=blocks, timestamp=0)], tools=[LOOKUP] if tools else None
    )
    stream = stream_simple(MODEL, context, tool_executor=execute if tools else None)
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()

    expect_done(events, message, tool_answer() if tools else scenario_answer("default"))
    # The host's tool was reached exactly once when offered (agy's MCP client found the bridge).
    expected_calls = [("lookup_order", tool_arguments())] if tools else []
    assert [(c.name, dict(c.arguments)) for c in calls] == expected_calls
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
    # The image was viewed, by its bytes, when given; nothing was viewed otherwise.
    seen = f"{len(picture)} bytes, sha256 {hashlib.sha256(picture).hexdigest()[:12]}"
    assert (seen in thinking) is with_image, thinking
    assert ("view_file" in thinking) is with_image
    (turn,) = recorder.turns
    # A turn with an image runs its own agy; without one, the pool's when it is on.
    assert turn.process.request.warm is (warm and not with_image)
    assert leftovers(live_env, recorder) == []


async def test_a_warm_conversation_goes_on_after_a_turn_with_an_image(
    live_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image turn runs its own agy: the conversation's idle warm agy never saw it, so the
    # next turn must not reuse that agy (it would write over the image turn's steps).
    monkeypatch.setenv("AGY_WARM", "1")
    history: list[Any] = []
    prompts: list[list[Any]] = [
        [TextContent(text="one")],
        [TextContent(text="two"), image(png(), "image/png")],
        [TextContent(text="three")],
    ]
    for blocks in prompts:
        history.append(UserMessage(content=blocks, timestamp=0))
        options = SimpleStreamOptions(session_id="s")
        stream = stream_simple(MODEL, Context(messages=list(history)), options)
        events = [event async for event in stream]
        message = await stream.result()
        await wait_for_turns()
        expect_done(events, message, scenario_answer("default"))
        history.append(message)
    first, second, third = recorder.turns
    conversation = first.binding.conversation_id
    assert second.binding.conversation_id == conversation == third.binding.conversation_id
    assert (first.process.request.warm, second.process.request.warm) == (True, False)
    assert third.process.request.warm and third.process.pid != first.process.pid
    assert third.process.result["num_turns"] == 3  # agy's own count: it saw the image turn
    assert leftovers(live_env, recorder) == []
