"""The registry of parked turns, pure: only a call of the parked turn's own session finds it, and
a user message right after the tool results goes along, appended to the last result (pi sends
one for a result's images over Chat Completions, and after abandoning a call)."""

from __future__ import annotations

from typing import Any

from fakes import FakeParkedTurn

from agy_provider.bridge.host_tools import FOLLOWING_USER_MESSAGE
from agy_provider.bridge.host_tools import ParkedTurns
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage


def results_then_user(call_id: str) -> list[Any]:
    call = ToolCall(id=call_id, name="shot", arguments={})
    return [
        UserMessage(content="Take a picture.", timestamp=0),
        AssistantMessage(
            content=[call], api="agy", provider="agy", model="", stop_reason="toolUse", timestamp=0
        ),
        ToolResultMessage(
            tool_call_id=call_id, tool_name="shot", content=[TextContent(text="done")], timestamp=0
        ),
        UserMessage(
            content=[
                TextContent(text="Attached image(s) from tool result:"),
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
            ],
            timestamp=0,
        ),
    ]


def test_a_parked_turn_is_found_only_by_its_owner_and_takes_the_user_message_after() -> None:
    parked = ParkedTurns()
    turn = FakeParkedTurn(session_id="serve:alice")
    parked.park(["call-1"], turn)
    messages = results_then_user("call-1")
    assert parked.find(messages, "serve:bob") is None
    assert parked.find(messages, "") is None
    found = parked.find(messages, "serve:alice")
    assert found is not None and found[0] is turn
    result = found[1]["call-1"]
    assert [type(b).__name__ for b in result.content] == [
        "TextContent",
        "TextContent",
        "TextContent",
        "ImageContent",
    ]
    assert result.content[1] == TextContent(text=FOLLOWING_USER_MESSAGE)
    assert parked.find(messages[:-1], "serve:alice") is not None  # results alone, as before


def test_results_without_a_parked_turn_or_a_user_message_alone_find_nothing() -> None:
    parked = ParkedTurns()
    parked.park(["call-1"], FakeParkedTurn(session_id=""))
    messages = results_then_user("call-2")
    assert parked.find(messages, "") is None
    assert parked.find([messages[0]], "") is None  # a user message after no results
    assert not parked.resumed_by_another(messages)
    parked.answered(["call-2"], FakeParkedTurn())
    assert parked.resumed_by_another(messages)  # the trailing user message does not hide them
