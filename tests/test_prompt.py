"""What agy is told (`prompt.build_prompt`), and how a host's tool results find their turn."""

from __future__ import annotations

import pytest
from fakes import FakeParkedTurn

from agy_provider.bridge.host_tools import ParkedTurns
from agy_provider.errors import UsageError
from agy_provider.live.prompt import build_prompt
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

CALL = ToolCall(id="mcp-1", name="lookup", arguments={"id": "A-1"})
ASKED = AssistantMessage(
    content=(TextContent(text="Checking."), CALL),
    api="agy",
    provider="agy",
    model="m",
    stop_reason="toolUse",
    timestamp=0,
)


def result(call_id: str = "mcp-1", text: str = "shipped", error: bool = False) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name="lookup",
        content=[TextContent(text=text)],
        is_error=error,
        timestamp=0,
    )


def test_tool_results_no_turn_waits_for_are_the_newest_input_with_the_calls_in_the_preamble() -> (
    None
):
    context = Context(
        messages=[UserMessage(content="Where is A-1?", timestamp=0), ASKED, result()],
        system_prompt="Be brief.",
    )
    prompt = build_prompt(context, resume=False)
    assert prompt.startswith("<system>\nBe brief.\n</system>")
    assert '<tool_call tool="lookup">\n{"id": "A-1"}\n</tool_call>' in prompt
    assert prompt.endswith(
        '<tool_result tool="lookup">\nshipped\n</tool_result>\n\n'
        "These are the results of the host tools you called; continue the task."
    )
    resumed = build_prompt(context, resume=True)
    assert resumed.startswith('<tool_result tool="lookup">') and "<conversation>" not in resumed


def test_a_failed_tool_result_says_so() -> None:
    context = Context(messages=[ASKED, result(text="no such order", error=True)])
    assert '<tool_result tool="lookup" error>\nno such order' in build_prompt(context, resume=True)


def test_the_newest_message_must_be_the_users_or_tool_results() -> None:
    with pytest.raises(UsageError, match="user's or tool results"):
        build_prompt(
            Context(messages=[UserMessage(content="hi", timestamp=0), ASKED]), resume=False
        )


def test_the_trailing_results_find_the_one_turn_that_asked() -> None:
    parked, turn, other = ParkedTurns(), FakeParkedTurn("s"), FakeParkedTurn()
    parked.park(["mcp-1", "mcp-2"], turn)
    parked.park(["mcp-9"], other)
    asked = [UserMessage(content="q", timestamp=0), ASKED, result("mcp-1"), result("mcp-2")]
    found = parked.find(asked, "s")
    assert found is not None and found[0] is turn and set(found[1]) == {"mcp-1", "mcp-2"}
    # Only its owner's results resume it (tests/test_parked_turns.py: a user message after
    # them goes along); results of two turns at once resume neither.
    assert parked.find(asked) is None and parked.find(asked, "t") is None
    assert parked.find([result("mcp-1"), result("mcp-9")], "s") is None
    assert parked.of_session("s") == [turn] and parked.of_session("") == []
    parked.release(turn)
    assert parked.find([result("mcp-1")]) is None and parked.all() == [other]
