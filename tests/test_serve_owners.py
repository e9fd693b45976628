"""serve's ownership rule, pure: whose request it is (the client's own signal, strongest first),
thinking signatures that only their owner's transcript passes, answers restored per owner, side
requests off a main line."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from fakes import FakeParkedTurn

from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.memory import FOREIGN_THINKING
from agy_provider.hosts.serve.memory import DeliveredMessages
from agy_provider.hosts.serve.owners import Owner
from agy_provider.hosts.serve.owners import Owners
from agy_provider.hosts.serve.owners import ThinkingSigner
from agy_provider.hosts.serve.owners import owner_of
from agy_provider.live.continuity import make_mark
from agy_provider.live.continuity import mark_message
from agy_provider.live.parking import PARKED
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall

CONVERSATION = "0b4f3c1e-aaaa-bbbb-cccc-000000000001"
CLAUDE_USER_ID = json.dumps(
    {
        "device_id": "d" * 64,
        "account_uuid": "",
        "session_id": "5f0c7c1e-1111-2222-3333-444455556666",
    }
)


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        ({"user": "u1"}, {"x-agy-session": "pinned"}, Owner("pinned", "x-agy-session")),
        ({"user": "u1", "metadata": {"user_id": "m1"}}, {}, Owner("u1", "user")),
        ({"metadata": {"user_id": "m1"}}, {}, Owner("m1", "metadata.user_id")),
        (
            {"metadata": {"user_id": CLAUDE_USER_ID}},
            {"x-claude-code-session-id": "other"},
            Owner("5f0c7c1e-1111-2222-3333-444455556666", "metadata.user_id.session_id"),
        ),
        (
            {"prompt_cache_key": "pck"},
            {"x-claude-code-session-id": "cc"},
            Owner("cc", "x-claude-code-session-id"),
        ),
        ({"prompt_cache_key": "pck"}, {"session_id": "codex"}, Owner("codex", "session_id")),
        ({}, {"x-opencode-session": "ses_1"}, Owner("ses_1", "x-opencode-session")),
        ({"prompt_cache_key": "pck"}, {}, Owner("pck", "prompt_cache_key")),
        ({"previous_response_id": "resp_1"}, {}, Owner("owner-of-resp", "previous_response_id")),
        ({"previous_response_id": "resp_unknown"}, {}, Owner()),
        ({"metadata": {}}, {}, Owner("", "transcript")),
    ],
)
def test_the_owner_is_the_strongest_signal_the_client_sent(
    body: dict[str, Any], headers: dict[str, str], expected: Owner
) -> None:
    assert owner_of(body, headers, {"resp_1": "owner-of-resp"}) == expected


def test_a_header_that_cannot_be_a_key_is_hashed_but_an_explicit_bad_key_is_refused() -> None:
    owner = owner_of({}, {"x-opencode-session": "has spaces and ünïcode"})
    assert owner.source == "x-opencode-session" and owner.key.startswith("h-")
    assert owner == owner_of({}, {"x-opencode-session": "has spaces and ünïcode"})
    with pytest.raises(RequestError, match="user"):
        owner_of({"user": "has spaces"}, {})


def test_a_thinking_signature_holds_only_for_its_owner_its_text_and_its_server() -> None:
    signer = ThinkingSigner()
    signature = signer.sign("alice", "I think.")
    assert signer.verify("alice", "I think.", signature)
    assert not signer.verify("bob", "I think.", signature)
    assert not signer.verify("alice", "I think!", signature)  # edited
    assert not signer.verify("alice", "I think.", signature[:-2] + "AA")  # forged
    assert not signer.verify("alice", "I think.", make_mark(CONVERSATION, "f" * 32))
    assert not ThinkingSigner().verify("alice", "I think.", signature)  # another server's


def answer(text: str, token: str = "a" * 32, *calls: ToolCall) -> AssistantMessage:
    message = AssistantMessage(
        content=[ThinkingContent(thinking="Counting."), TextContent(text=text), *calls],
        api="agy",
        provider="agy",
        model="m",
        stop_reason="toolUse" if calls else "stop",
        timestamp=1,
    )
    return mark_message(message, make_mark(CONVERSATION, token))


def request(messages: list[Any], system: str = "main", **body: Any) -> Any:
    return anthropic_ask({"model": "default", "system": system, "messages": messages, **body})


def signature_of(message: Any) -> Any:
    """The signature of a message's first (thinking) block, as serve passes it on."""
    return message.content[0].thinking_signature


def client_blocks(signature: str, text: str = "One.") -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "Counting.", "signature": signature},
        {"type": "text", "text": text},
    ]


def first_turn(owners: Owners, owner: Owner) -> AssistantMessage:
    """Owner's first turn answered: remembered and settled as serve does at `done`."""
    ask = request([{"role": "user", "content": "Count."}])
    placement = owners.place(ask, owner)
    delivered = answer("One.")
    owners.delivered.remember(placement.messages, delivered, owner.key)
    owners.settled(owner, placement, delivered)
    return delivered


def test_a_transcript_continues_only_for_its_owner() -> None:
    owners = Owners(DeliveredMessages())
    alice, bob = Owner("alice", "user"), Owner("bob", "user")
    delivered = first_turn(owners, alice)
    blocks = client_blocks(owners.sign(alice, "Counting."))
    resent: list[Any] = [
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": "Go on."},
    ]
    mine = owners.place(request(resent), alice)
    assert mine.messages[1] is delivered and mine.expected == CONVERSATION
    assert mine.session_key == "alice"
    theirs = owners.place(request(resent), bob)  # another key replaying the transcript
    assert theirs.messages[1] is not delivered and not theirs.expected
    assert signature_of(theirs.messages[1]) == FOREIGN_THINKING  # alice's signature is not bob's
    nobody = owners.place(request(resent), Owner())
    assert nobody.messages[1] is not delivered and not nobody.expected


def test_a_forged_or_edited_thinking_signature_is_not_ours_and_continues_nothing() -> None:
    owners = Owners(DeliveredMessages())
    delivered = first_turn(owners, Owner())
    for signature in ("forged", make_mark(CONVERSATION, "a" * 32), ""):
        resent: list[Any] = [
            {"role": "user", "content": "Count."},
            {"role": "assistant", "content": client_blocks(signature)},
            {"role": "user", "content": "Go on."},
        ]
        placed = owners.place(request(resent), Owner())
        assert placed.messages[1] is not delivered and not placed.expected
        # The client's signature never reaches the provider as a mark.
        assert signature_of(placed.messages[1]) == FOREIGN_THINKING
        assert not getattr(placed.messages[1], "response_id", None)


def test_a_conversation_without_a_key_is_claimed_by_the_first_key_that_continues_it() -> None:
    owners = Owners(DeliveredMessages())
    delivered = first_turn(owners, Owner())
    resent: list[Any] = [
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": client_blocks(owners.sign(Owner(), "Counting."))},
        {"role": "user", "content": "Go on."},
    ]
    carol = Owner("carol", "metadata.user_id")
    placed = owners.place(request(resent), carol)
    assert placed.messages[1] is delivered and placed.expected == CONVERSATION
    owners.settled(carol, placed, answer("Two.", "b" * 32))
    again = owners.place(request(resent), Owner())  # now carol's: no one else continues it
    assert again.messages[1] is not delivered and not again.expected


def test_a_side_request_off_the_main_line_gets_a_conversation_of_its_own() -> None:
    owners = Owners(DeliveredMessages())
    delivered = first_turn(owners, Owner())
    history: list[Any] = [
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": client_blocks(owners.sign(Owner(), "Counting."))},
    ]
    side = owners.place(
        request([*history, {"role": "user", "content": "Save a memory."}], system="memory"),
        Owner(),
    )
    assert side.side and not side.expected and side.messages[1] is not delivered
    assert side.no_resume and not side.session_key
    main = owners.place(request([*history, {"role": "user", "content": "Go on."}]), Owner())
    assert not main.side and main.expected == CONVERSATION and main.messages[1] is delivered


def test_a_keyed_side_request_leaves_the_keys_session_to_the_main_line() -> None:
    owners = Owners(DeliveredMessages())
    dave = Owner("dave", "x-claude-code-session-id")
    first_turn(owners, dave)
    tools = [{"name": "remember", "input_schema": {"type": "object"}}]
    side = owners.place(
        request([{"role": "user", "content": "Count."}], system="memory", tools=tools), dave
    )
    assert side.side and side.session_key == ""  # the provider's `serve:dave` is untouched


def test_results_for_the_owners_parked_call_resume_it_even_with_other_tools() -> None:
    owners = Owners(DeliveredMessages())
    erin = Owner("erin", "user")
    ask = request([{"role": "user", "content": "Look it up."}])
    placement = owners.place(ask, erin)
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
    tool_use = answer("", "c" * 32)
    tool_use = dataclasses.replace(
        tool_use, content=[ToolCall(id="toolu_1", name="lookup", arguments={})]
    )
    owners.delivered.remember(placement.messages, tool_use, erin.key)
    owners.settled(erin, placement, tool_use)

    parked = FakeParkedTurn(session_id=erin.session_id)
    PARKED.park(["toolu_1"], parked)
    try:
        results = [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ]
        tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
        mine = owners.place(request(results, system="changed", tools=tools), erin)
        assert mine.resuming and not mine.side and not mine.no_resume
        theirs = owners.place(request(results), Owner("frank", "user"))
        assert not theirs.resuming
    finally:
        PARKED.release(parked)
