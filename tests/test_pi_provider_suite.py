"""pi's own provider test suite (pi-mono `packages/ai/test`), held against agy through our real
`stream_simple` and agy-sim: empty and whitespace-only input, an empty assistant message in the
history, emoji and lone surrogates in prompts and tool results, a tool call left without its
result, aborts before and during a turn, and `totalTokens` as the sum of the four counters.

Each test asserts what pi asserts of every provider; where agy differs, the adaptation is said
at the test. Beyond pi: exactly one terminal event, never "failed unexpectedly" (a traceback of
ours), and no process left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import scenario_answer
from live_helpers import terminal
from pi_suite_texts import EMOJI
from pi_suite_texts import LONE_HIGH

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import Usage
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow

TEST_TOOL = Tool("test_tool", "A test tool", {"type": "object", "properties": {}})


def user(content: Any) -> UserMessage:
    return UserMessage(content=content, timestamp=0)


def assistant(content: list[Any], stop_reason: str = "stop", usage: Usage | None = None) -> Any:
    return AssistantMessage(
        content=content,
        api="agy",
        provider="agy",
        model=MODEL.id,
        usage=usage or Usage(),
        stop_reason=stop_reason,  # type: ignore[arg-type]
        timestamp=0,
    )


async def complete(
    context: Context, signal: AbortSignal | None = None, abort_after: int = 0
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    """One turn through `stream_simple`; with `abort_after`, the signal is raised once that many
    characters of text or thinking have streamed (pi's mid-stream abort)."""
    stream = stream_simple(MODEL, context, SimpleStreamOptions(signal=signal))
    events: list[AssistantMessageEvent] = []
    streamed = 0
    async for event in stream:
        events.append(event)
        if signal is not None and abort_after and event.type in ("text_delta", "thinking_delta"):
            streamed += len(getattr(event, "delta", ""))
            if streamed >= abort_after and not signal.aborted:
                signal.abort("test")
    message = await stream.result()
    await wait_for_turns()
    return events, message


def handled(events: list[AssistantMessageEvent], message: AssistantMessage) -> None:
    """pi's "handled gracefully or an error": an assistant message; an error says what failed."""
    terminal(events)
    assert message.role == "assistant"
    if message.stop_reason == "error":
        assert message.error_message
        assert "failed unexpectedly" not in message.error_message, message.error_message
    else:
        assert message.content is not None


def sums(usage: Usage) -> bool:
    """pi's tokens rule: totalTokens is input + output + cacheRead + cacheWrite."""
    return usage.total_tokens == (usage.input + usage.output + usage.cache_read + usage.cache_write)


# --- empty.test.ts -------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [[], "", "   \n\t  "], ids=["no-blocks", "empty", "blank"])
async def test_empty_or_blank_user_content_is_handled(
    live_env: Path, recorder: Any, content: Any
) -> None:
    # pi accepts either outcome for every provider: an answer, or an error that says why.
    events, message = await complete(Context(messages=[user(content)]))
    handled(events, message)
    assert leftovers(live_env, recorder) == []


async def test_an_empty_assistant_message_in_the_history_still_gets_an_answer(
    live_env: Path,
) -> None:
    history: list[Message] = [
        user("Hello, how are you?"),
        assistant([], usage=Usage(input=10, total_tokens=10)),
        user("Please respond this time."),
    ]
    events, message = await complete(Context(messages=history))
    handled(events, message)
    # pi: when it answers, the answer has content. agy-sim answers, so: the scenario's answer.
    expect_done(events, message, scenario_answer("default"))
    assert len(message.content) > 0


# --- unicode-surrogate.test.ts -------------------------------------------------------------------


def tool_result_context(result_text: str, follow_up: str) -> Context:
    """pi's shape: a user asks, the assistant called `test_tool`, its result, a follow-up."""
    return Context(
        system_prompt="You are a helpful assistant.",
        messages=[
            user("Use the test tool"),
            assistant([ToolCall(id="test_1", name="test_tool", arguments={})], "toolUse"),
            ToolResultMessage(
                tool_call_id="test_1",
                tool_name="test_tool",
                content=[TextContent(text=result_text)],
                timestamp=0,
            ),
            user(follow_up),
        ],
        tools=[TEST_TOOL],
    )


@pytest.mark.parametrize(
    ("result_text", "follow_up"),
    [
        (EMOJI, "Summarize the tool result briefly."),
        (
            'Post: Hab einen "Generative KI für Nicht-Techniker" Workshop gebaut.\n'
            '=> {"comments": [{"text": "Mario Zechner wann? Wo? äußersr 🙈"}]}',
            "How many comments are there?",
        ),
        (
            f"Text with unpaired surrogate: {LONE_HIGH} <- should be sanitized",
            "What did it return?",
        ),
    ],
    ids=["emoji", "real-world-comments", "unpaired-high-surrogate"],
)
async def test_emoji_and_lone_surrogates_in_tool_results_get_an_answer(
    live_env: Path, recorder: Any, result_text: str, follow_up: str
) -> None:
    events, message = await complete(tool_result_context(result_text, follow_up))
    assert message.stop_reason != "error", message.error_message
    assert not message.error_message
    assert any(isinstance(b, TextContent) for b in message.content)
    expect_done(events, message, scenario_answer("default"))
    turn = recorder.turns[-1]
    assert LONE_HIGH not in turn.prompt  # sanitised before agy: U+FFFD in its place
    if LONE_HIGH in result_text:
        assert "unpaired surrogate: \ufffd <-" in turn.prompt
    else:
        assert "🙈" in turn.prompt  # valid text reaches agy unchanged
    assert leftovers(live_env, recorder) == []


async def test_a_lone_surrogate_in_the_prompt_and_system_prompt_gets_an_answer(
    live_env: Path,
) -> None:
    # The brief's own case beside pi's: the user's text itself (and the system prompt) broken.
    context = Context(
        system_prompt=f"Be brief {LONE_HIGH}.",
        messages=[user(f"Hello {LONE_HIGH} there 🙈")],
    )
    events, message = await complete(context)
    expect_done(events, message, scenario_answer("default"))


# --- tool-call-without-result.test.ts ------------------------------------------------------------


async def test_a_tool_call_left_without_its_result_does_not_fail_the_next_turn(
    live_env: Path, recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    lookup = Tool("lookup_order", "Look up an order", TOOL_PARAMETERS)
    context = Context(
        system_prompt="You are a helpful assistant. Use the lookup tool when asked.",
        messages=[user("Where is order A-1042? Use the lookup tool.")],
        tools=[lookup],
    )
    _, first = await complete(context)
    assert first.stop_reason == "toolUse"
    assert any(isinstance(b, ToolCall) for b in first.content)
    # The host never runs the tool: the next user message comes without its result.
    follow = Context(
        system_prompt=context.system_prompt,
        messages=[*context.messages, first, user("Never mind, just tell me what is 2+2?")],
        tools=[lookup],
    )
    events, second = await complete(follow)
    assert second.stop_reason != "error", second.error_message
    assert len(second.content) > 0
    texts = "".join(b.text for b in second.content if isinstance(b, TextContent))
    calls = [b for b in second.content if isinstance(b, ToolCall)]
    assert calls or texts
    assert second.stop_reason in ("stop", "toolUse")  # pi: answer, or call a tool anew
    terminal(events)
    assert leftovers(live_env, recorder) == []


# --- abort.test.ts and tokens.test.ts ------------------------------------------------------------


async def test_an_abort_before_the_turn_then_a_new_message(live_env: Path, recorder: Any) -> None:
    signal = AbortSignal()
    signal.abort("before")
    context = Context(messages=[user("Hello, how are you?")])
    events, aborted = await complete(context, signal)
    expect_error(events, aborted, reason="aborted")
    assert len(aborted.content) == 0  # nothing arrived before the abort
    assert sums(aborted.usage)
    assert not list((live_env / "conversations").glob("*.db")), "agy ran after the abort"
    # pi's coding agent keeps the aborted message in the history, and goes on.
    follow = Context(messages=[*context.messages, aborted, user("What is 2 + 2?")])
    events, answer = await complete(follow)
    assert answer.stop_reason == "stop" and len(answer.content) > 0
    expect_done(events, answer, scenario_answer("default"))
    assert leftovers(live_env, recorder) == []


async def test_an_abort_mid_stream_keeps_what_streamed_then_the_turn_goes_on(
    live_env: Path, recorder: Any
) -> None:
    signal = AbortSignal()
    context = Context(
        system_prompt="You are a helpful assistant.",
        messages=[user("What is 15 + 27? Think step by step. Then list 50 first names.")],
    )
    events, aborted = await complete(context, signal, abort_after=20)
    expect_error(events, aborted, reason="aborted")
    assert len(aborted.content) > 0  # the thinking and text that streamed before the abort
    # tokens.test.ts: an aborted message's usage still adds up. agy records a model call's usage
    # only when the call ends, so an abort mid-call may count nothing yet (pi says the same of
    # the providers that send usage last) — the sum must hold either way.
    assert sums(aborted.usage)
    assert all(n >= 0 for n in (aborted.usage.input, aborted.usage.output))
    follow = Context(
        system_prompt=context.system_prompt,
        messages=[*context.messages, aborted, user("Please continue, but only generate 5 names.")],
    )
    _, answer = await complete(follow)
    assert answer.stop_reason == "stop" and len(answer.content) > 0
    assert leftovers(live_env, recorder) == []


# --- total-tokens.test.ts ------------------------------------------------------------------------


async def test_total_tokens_is_the_sum_of_the_four_counters(live_env: Path) -> None:
    system = "You are a helpful assistant. Be concise.\n\n" + "Lorem ipsum dolor sit amet. " * 80
    first_context = Context(
        system_prompt=system, messages=[user("What is 2 + 2? Reply with just the number.")]
    )
    _, first = await complete(first_context)
    assert first.stop_reason == "stop"
    second_context = Context(
        system_prompt=system,
        messages=[*first_context.messages, first, user("What is 3 + 3? Reply with the number.")],
    )
    _, second = await complete(second_context)
    assert second.stop_reason == "stop"
    for usage in (first.usage, second.usage):
        assert sums(usage), usage
        assert usage.input > 0 and usage.output > 0
        assert usage.cost.total == 0  # a subscription: no cost, as pi expects of Antigravity
