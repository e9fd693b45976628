"""Conversations without a session id, end to end against agy-sim (issue 16, items 1, 2, 4 and the
two-turns-at-once defect).

What agy receives is read from the turn's context (the prompt it was given) and from agy-sim's
database (the user step it recorded); which conversation a turn ran on, from its binding.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL
from live_helpers import Observed
from live_helpers import expect_done
from live_helpers import final_text
from live_helpers import recorded_user_inputs
from live_helpers import scenario_answer

from agy_provider.live.continuity import parse_mark
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow


async def turn(
    messages: list[Message], *, session: str | None = None
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    stream = stream_simple(MODEL, Context(messages=messages), SimpleStreamOptions(session_id=session))
    events = [event async for event in stream]
    message = await stream.result()
    return events, message


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=0)


def conversations(recorder: Observed) -> list[str]:
    return [t.binding.conversation_id for t in recorder.turns if t.binding is not None]


async def test_a_stateless_host_continues_one_conversation_sending_only_the_newest(
    live_env: Path, recorder: Observed
) -> None:
    answer = scenario_answer("default")
    transcript: list[Message] = []
    prompts: list[str] = []
    for n in range(10):
        transcript.append(user(f"question number {n}"))
        events, message = await turn(list(transcript))
        expect_done(events, message, answer)
        assert parse_mark(message.response_id) is not None
        transcript.append(message)
        await wait_for_turns()
        prompts.append(recorder.turns[-1].prompt)
    assert len(set(conversations(recorder))) == 1, conversations(recorder)
    assert [t.continuity for t in recorder.turns] == ["new", *["mark"] * 9]
    # agy is sent only the newest message on every later turn; the prompt does not grow.
    assert prompts[1:] == [f"question number {n}" for n in range(1, 10)]
    assert len(prompts[9]) == len(prompts[1])
    (conversation,) = set(conversations(recorder))
    assert recorded_user_inputs(live_env, conversation) == [f"question number {n}" for n in range(10)]


async def test_two_hosts_with_identical_transcripts_continue_their_own(
    live_env: Path, recorder: Observed
) -> None:
    hosts: list[list[Message]] = [[user("same words")], [user("same words")]]
    for _round in range(2):
        results = await asyncio.gather(*(turn(list(h)) for h in hosts))
        for transcript, (_events, message) in zip(hosts, results, strict=True):
            transcript.extend([message, user("and again")])
        await wait_for_turns()
    by_host = [
        {parse_mark(m.response_id)[0] for m in h if isinstance(m, AssistantMessage)}  # type: ignore[index]
        for h in hosts
    ]
    assert all(len(ids) == 1 for ids in by_host), by_host
    assert by_host[0] != by_host[1]
    assert len(set(conversations(recorder))) == 2


async def test_twenty_concurrent_stateless_hosts_never_misbind(
    live_env: Path, recorder: Observed
) -> None:
    hosts: list[list[Message]] = [[user("identical prompt")] for _ in range(20)]
    first = await asyncio.gather(*(turn(list(h)) for h in hosts))
    for transcript, (_e, message) in zip(hosts, first, strict=True):
        transcript.extend([message, user("identical follow-up")])
    await wait_for_turns()
    second = await asyncio.gather(*(turn(list(h)) for h in hosts))
    await wait_for_turns()
    for transcript, (events, message) in zip(hosts, second, strict=True):
        expect_done(events, message, scenario_answer("default"))
        before = parse_mark(transcript[1].response_id)  # type: ignore[union-attr]
        after = parse_mark(message.response_id)
        assert before is not None and after is not None and before[0] == after[0]
    assert len({parse_mark(m.response_id)[0] for _e, m in second}) == 20  # type: ignore[index]


async def test_a_host_that_drops_the_mark_gets_a_new_conversation_and_the_log_says_why(
    live_env: Path, recorder: Observed, caplog: pytest.LogCaptureFixture
) -> None:
    _events, message = await turn([user("first")])
    await wait_for_turns()
    # This host rebuilds assistant messages from their text alone: the mark is gone.
    rebuilt = AssistantMessage(
        content=[TextContent(text=final_text(message))],
        api="agy",
        provider="agy",
        model=MODEL.id,
        stop_reason="stop",
        timestamp=0,
    )
    with caplog.at_level(logging.INFO, logger="agy_provider.live.turn"):
        _events, _second = await turn([user("first"), rebuilt, user("second")])
    await wait_for_turns()
    assert len(set(conversations(recorder))) == 2
    assert recorder.turns[-1].continuity == "new"
    assert "<conversation>" in recorder.turns[-1].prompt  # the history went as a preamble
    assert any("bears agy-provider's mark" in r.getMessage() for r in caplog.records)


async def test_messages_agy_never_saw_go_as_one_labelled_block(
    live_env: Path, recorder: Observed
) -> None:
    _events, message = await turn([user("start")])
    await wait_for_turns()
    other = AssistantMessage(
        content=[TextContent(text="an answer from another provider")],
        api="openai-completions",
        provider="openai",
        model="gpt",
        stop_reason="stop",
        timestamp=0,
    )
    transcript: list[Message] = [
        user("start"),
        message,
        user("switching models for a moment"),
        other,
        user("back to agy"),
    ]
    events, reply = await turn(transcript)
    await wait_for_turns()
    expect_done(events, reply, scenario_answer("default"))
    assert len(set(conversations(recorder))) == 1
    prompt = recorder.turns[-1].prompt
    assert prompt.startswith("<unseen_messages>") and prompt.endswith("\n\nback to agy")
    assert "an answer from another provider" in prompt and "start" not in prompt


@pytest.mark.parametrize("host_keeps_the_aborted_message", [True, False])
async def test_an_aborted_turn_keeps_the_conversation_whatever_the_host_keeps(
    live_env: Path,
    recorder: Observed,
    monkeypatch: pytest.MonkeyPatch,
    host_keeps_the_aborted_message: bool,
) -> None:
    from agy_provider.pi.options import AbortSignal

    _events, first = await turn([user("one")])
    await wait_for_turns()
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    signal = AbortSignal()
    transcript: list[Message] = [user("one"), first, user("two")]
    stream = stream_simple(MODEL, Context(messages=transcript), SimpleStreamOptions(signal=signal))
    async for event in stream:
        if event.type == "text_delta":
            signal.abort()
    aborted = await stream.result()
    assert aborted.stop_reason == "aborted", aborted.error_message
    await wait_for_turns()
    monkeypatch.delenv("AGY_SIM_SCENARIO")
    # pi keeps the aborted message; another host drops it. Both continue the conversation.
    kept = [*transcript, aborted] if host_keeps_the_aborted_message else transcript
    _e, reply = await turn([*kept, user("three")])
    await wait_for_turns()
    assert reply.stop_reason == "stop"
    assert len(set(conversations(recorder))) == 1
    assert recorder.turns[-1].continuity == "mark"


async def test_a_conversation_agy_lost_runs_as_a_new_one_and_says_so(
    live_env: Path, recorder: Observed
) -> None:
    _events, first = await turn([user("remember this")], session="s")
    await wait_for_turns()
    (lost,) = conversations(recorder)
    for path in (live_env / "conversations").glob(f"{lost}.db*"):
        path.unlink()
    events, reply = await turn([user("remember this"), first, user("what was it?")], session="s")
    await wait_for_turns()
    expect_done(events, reply, scenario_answer("default"))
    new = conversations(recorder)[-1]
    assert new != lost
    assert recorder.turns[-1].lost_conversation == lost
    assert "<conversation>" in recorder.turns[-1].prompt  # the history came along
    (diagnostic,) = [d for d in reply.diagnostics or () if d["type"].endswith("conversation_lost")]
    assert diagnostic["details"]["lost"] == lost
    # The session now points at the new conversation: the next turn continues it.
    _e, _third = await turn(
        [user("remember this"), first, user("what was it?"), reply, user("thanks")], session="s"
    )
    await wait_for_turns()
    assert conversations(recorder)[-1] == new and recorder.turns[-1].continuity == "session"


async def test_two_turns_of_one_conversation_at_once_run_one_after_the_other(
    live_env: Path, recorder: Observed, monkeypatch: pytest.MonkeyPatch
) -> None:
    _events, first = await turn([user("one")], session="s")
    await wait_for_turns()
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    transcript: list[Message] = [user("one"), first, user("two")]
    overlap: list[int] = []
    running = 0

    async def watched(messages: list[Message]) -> Any:
        nonlocal running
        stream = stream_simple(
            MODEL, Context(messages=messages), SimpleStreamOptions(session_id="s")
        )
        async for event in stream:
            if event.type == "text_start":
                running += 1
                overlap.append(running)
            if event.type == "text_end":
                running -= 1
        return await stream.result()

    replies = await asyncio.gather(watched(list(transcript)), watched(list(transcript)))
    await wait_for_turns()
    assert [r.stop_reason for r in replies] == ["stop", "stop"]
    assert max(overlap) == 1, "two agy turns of one conversation streamed at the same time"
    assert len(set(conversations(recorder))) == 1


def test_the_sync_api_continues_by_mark_too(live_env: Path, recorder: Observed) -> None:
    from agy_provider.hosts.sync import complete

    transcript: list[Message] = [user("sync one")]
    transcript.append(complete(MODEL, Context(messages=list(transcript))))
    transcript.append(user("sync two"))
    reply = complete(MODEL, Context(messages=list(transcript)))
    assert reply.stop_reason == "stop" and final_text(reply) == scenario_answer("default")
    assert len(set(conversations(recorder))) == 1
    assert recorder.turns[-1].continuity == "mark" and recorder.turns[-1].prompt == "sync two"
