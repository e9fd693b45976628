"""Continuity without a session id, the pure part: marks, and the proof a transcript gives.

The live half (agy-sim, real hosts) is `tests/test_live_continuity.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agy_provider.live.continuity import conversation_key
from agy_provider.live.continuity import find_continuation
from agy_provider.live.continuity import make_mark
from agy_provider.live.continuity import mark_message
from agy_provider.live.continuity import parse_mark
from agy_provider.live.prompt import build_prompt
from agy_provider.live.prompt import history_digest
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage
from agy_provider.store.sessions import SessionRecord

CID = "0b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d"
TOKEN = "a" * 32
OTHER = "b" * 32


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=0)


def answer(text: str, *, provider: str = "agy", **kw: Any) -> AssistantMessage:
    return AssistantMessage(
        content=(ThinkingContent(thinking="hm"), TextContent(text=text)),
        api=provider,
        provider=provider,
        model="m",
        stop_reason="stop",
        timestamp=0,
        **kw,
    )


def record_for(history: list[Message], token: str = TOKEN, **kw: Any) -> SessionRecord:
    return SessionRecord(
        conversation_id=CID,
        last_step_index=9,
        history_digest=history_digest(history),
        mark=token,
        **kw,
    )


def lookup_of(*records: SessionRecord) -> Any:
    table = {conversation_key(r.conversation_id): r for r in records}
    return table.get


def test_a_mark_round_trips_and_nothing_else_parses() -> None:
    mark = make_mark(CID, TOKEN)
    assert parse_mark(mark) == (CID, TOKEN)
    for other in (None, "", "resp_123", mark + "x", mark.replace(CID, "-x"), 7, "chatcmpl-1"):
        assert parse_mark(other) is None


def test_every_field_pi_keeps_for_provider_state_carries_the_mark() -> None:
    message = AssistantMessage(
        content=(
            ThinkingContent(thinking="t"),
            TextContent(text="x"),
            ToolCall(id="c", name="n", arguments={}),
        ),
        api="agy",
        provider="agy",
        model="m",
        stop_reason="toolUse",
        timestamp=0,
    )
    mark = make_mark(CID, TOKEN)
    marked = mark_message(message, mark)
    assert marked.response_id == mark
    thinking, text, call = marked.content
    assert isinstance(thinking, ThinkingContent) and thinking.thinking_signature == mark
    assert isinstance(text, TextContent) and text.text_signature == mark
    assert isinstance(call, ToolCall) and call.thought_signature == mark
    # A host that keeps only one carrier (pi-agent-core keeps no responseId) still proves it.
    earlier: list[Message] = [user("q"), dataclasses.replace(marked, response_id=None)]
    assert find_continuation(earlier, lookup_of(record_for(earlier))).conversation_id == CID


def test_the_newest_marked_message_proves_its_conversation() -> None:
    earlier: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, TOKEN))]
    found = find_continuation(earlier, lookup_of(record_for(earlier)))
    assert found.proven and found.conversation_id == CID and found.unseen == ()


def test_no_mark_or_unknown_conversation_is_no_continuation() -> None:
    plain: list[Message] = [user("q"), answer("a")]
    assert not find_continuation(plain, lookup_of()).proven
    assert "mark" in find_continuation(plain, lookup_of()).why
    marked: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, TOKEN))]
    lost = find_continuation(marked, lookup_of())
    assert not lost.proven and "no record" in lost.why
    assert not find_continuation([], lookup_of()).proven


def test_two_hosts_with_identical_words_each_prove_only_their_own() -> None:
    cid_b = "1b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d"
    host_a: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, TOKEN))]
    host_b: list[Message] = [user("q"), answer("a", response_id=make_mark(cid_b, OTHER))]
    records = lookup_of(
        record_for(host_a), dataclasses.replace(record_for(host_b, OTHER), conversation_id=cid_b)
    )
    assert find_continuation(host_a, records).conversation_id == CID
    assert find_continuation(host_b, records).conversation_id == cid_b
    # Host B's message with host A's conversation but B's token: refused, never guessed.
    forged: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, OTHER))]
    assert not find_continuation(forged, records).proven


def test_a_rewritten_transcript_before_the_mark_starts_a_new_conversation() -> None:
    earlier: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, TOKEN))]
    records = lookup_of(record_for(earlier))
    rewritten: list[Message] = [user("q, edited"), earlier[1]]
    found = find_continuation(rewritten, records)
    assert not found.proven and "differs" in found.why


def test_what_agy_never_saw_is_the_unseen_delta() -> None:
    earlier: list[Message] = [
        user("the first question"),
        answer("agy's first answer", response_id=make_mark(CID, TOKEN)),
    ]
    records = lookup_of(record_for(earlier))
    later: list[Message] = [
        *earlier,
        user("now ask another model"),
        answer("other model's answer", provider="openai"),
        user("summary of the compacted part"),
    ]
    found = find_continuation(later, records)
    assert found.conversation_id == CID and found.unseen == tuple(later[2:])
    prompt = build_prompt(
        Context(messages=[*later, user("newest")]), resume=True, unseen=found.unseen
    )
    assert prompt.endswith("\n\nnewest")
    assert "other model's answer" in prompt and "<unseen_messages>" in prompt
    # What agy already holds (its own turn and the question before it) is never replayed.
    assert "the first question" not in prompt and "agy's first answer" not in prompt


def test_an_older_answer_stays_acceptable_while_later_turns_failed() -> None:
    first: list[Message] = [user("q"), answer("a", response_id=make_mark(CID, TOKEN))]
    aborted = dataclasses.replace(
        answer("par", response_id=make_mark(CID, OTHER)), stop_reason="aborted"
    )
    kept: list[Message] = [*first, user("q2"), aborted]
    record = record_for(
        kept, OTHER, answered_mark=TOKEN, answered_digest=history_digest(first)
    )
    # The host kept the aborted message: its mark proves the conversation.
    assert find_continuation(kept, lookup_of(record)).conversation_id == CID
    # The host dropped it: the answer before still does; the retried question is unseen.
    dropped: list[Message] = [*first, user("q2")]
    found = find_continuation(dropped, lookup_of(record))
    assert found.conversation_id == CID and found.unseen == (dropped[2],)
    # Once a later turn answered, going back to the older answer is a rewrite.
    moved_on = record_for(kept, OTHER, answered_mark=OTHER, answered_digest=history_digest(kept))
    assert not find_continuation(dropped, lookup_of(moved_on)).proven


def test_tool_results_after_a_marked_tool_use_message_are_the_newest_input() -> None:
    call = ToolCall(id="c1", name="lookup", arguments={"q": 1})
    asked = AssistantMessage(
        content=(call,), api="agy", provider="agy", model="m", stop_reason="toolUse", timestamp=0
    )
    asked = mark_message(asked, make_mark(CID, TOKEN))
    earlier: list[Message] = [user("q"), asked]
    found = find_continuation(earlier, lookup_of(record_for(earlier)))
    assert found.conversation_id == CID and found.unseen == ()
    result = ToolResultMessage(
        tool_call_id="c1", tool_name="lookup", content=[TextContent(text="42")], timestamp=0
    )
    prompt = build_prompt(Context(messages=[*earlier, result]), resume=True)
    assert "42" in prompt and "<conversation>" not in prompt


@given(st.lists(st.text(max_size=20), min_size=1, max_size=6), st.text(max_size=20))
def test_any_change_before_the_mark_is_seen(words: list[str], change: str) -> None:
    history: list[Message] = [user(w) for w in words]
    earlier: list[Message] = [*history, answer("a", response_id=make_mark(CID, TOKEN))]
    records = lookup_of(record_for(earlier))
    assert find_continuation(earlier, records).proven
    if change != words[0]:
        altered: list[Message] = [user(change), *earlier[1:]]
        assert not find_continuation(altered, records).proven
