"""serve's request side, pure: OpenAI and Anthropic requests as pi contexts, refusals naming the
field, the memory of delivered answers (a resent transcript gets its marks back; an edited one
does not), and the structured-output check."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import session_key
from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.convert import openai_ask
from agy_provider.hosts.serve.memory import DeliveredMessages
from agy_provider.hosts.serve.turn import StructuredOutputError
from agy_provider.hosts.serve.turn import parse_structured
from agy_provider.live.continuity import make_mark
from agy_provider.live.continuity import mark_message
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

PNG = "iVBORw0KGgo="  # base64 of the PNG magic bytes
MARK = make_mark("0b4f3c1e-aaaa-bbbb-cccc-000000000001", "f" * 32)


def delivered(text: str, *calls: ToolCall) -> AssistantMessage:
    """An answer as the provider delivers it: thinking, text, calls, the mark on all of them."""
    message = AssistantMessage(
        content=[ThinkingContent(thinking="hmm"), TextContent(text=text), *calls],
        api="agy",
        provider="agy",
        model="gemini-3.7-flash",
        stop_reason="toolUse" if calls else "stop",
        timestamp=1,
    )
    return mark_message(message, MARK)


def test_openai_messages_become_pi_messages() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ask = openai_ask(
        {
            "model": "agy/gemini-3.7-flash",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    ],
                },
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "reasoning_effort": "high",
            "user": "alice@example",
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert ask.model == "gemini-3.7-flash"
    assert ask.context.system_prompt == "Be brief.\n\nUse tools."
    user, assistant, result = ask.context.messages
    assert isinstance(user, UserMessage) and isinstance(user.content[1], ImageContent)
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == (ToolCall(id="c1", name="f", arguments={"a": 1}),)
    assert isinstance(result, ToolResultMessage) and result.tool_name == "f"
    assert [t.name for t in ask.context.tools or ()] == ["f"]
    assert (ask.reasoning, ask.session_key, ask.stream, ask.include_usage) == (
        "high",
        "alice@example",
        True,
        True,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        (
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": ""}]},
            "tool_call_id",
        ),
        ({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]}, "n"),
        ({"model": "m", "user": "a b", "messages": [{"role": "user", "content": "x"}]}, "user"),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    }
                ],
            },
            "data: URLs",
        ),
        (
            {
                "model": "m",
                "response_format": {"type": "json_schema"},
                "messages": [{"role": "user", "content": "x"}],
            },
            "response_format",
        ),
    ],
)
def test_openai_refusals_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError, match=field) as caught:
        openai_ask(body)
    assert caught.value.status == 400


def test_openai_response_formats_become_schemas() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    schema = {"type": "object", "required": ["n"]}
    spec = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    assert openai_ask({**base, "response_format": spec}).json_schema == schema
    assert openai_ask({**base, "response_format": {"type": "json_object"}}).json_schema == {
        "type": "object"
    }
    assert openai_ask({**base, "response_format": {"type": "text"}}).json_schema is None


def test_anthropic_messages_become_pi_messages() -> None:
    ask = anthropic_ask(
        {
            "model": "default",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief."}],
            "metadata": {"user_id": "u-1"},
            "thinking": {"type": "enabled", "budget_tokens": 8000},
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": MARK},
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
        }
    )
    assert ask.context.system_prompt == "Be brief."
    _, assistant, result, follow = ask.context.messages
    assert isinstance(assistant, AssistantMessage)
    assert isinstance(assistant.content[0], ThinkingContent)
    assert assistant.content[0].thinking_signature == MARK  # the mark rides back in the signature
    assert isinstance(result, ToolResultMessage) and result.tool_name == "f"
    assert isinstance(follow, UserMessage)
    assert (ask.session_key, ask.reasoning) == ("u-1", "medium")


def test_anthropic_tool_forcing_is_structured_output() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    ask = anthropic_ask(
        {
            "model": "default",
            "max_tokens": 10,
            "tools": [{"name": "record", "input_schema": schema}],
            "tool_choice": {"type": "tool", "name": "record"},
            "messages": [{"role": "user", "content": "Paris"}],
        }
    )
    assert (ask.json_schema, ask.forced_tool, ask.context.tools) == (schema, "record", None)
    with pytest.raises(RequestError, match="tool_choice"):
        anthropic_ask({**dict(ask_body()), "tool_choice": {"type": "tool", "name": "nope"}})


def ask_body() -> dict[str, Any]:
    return {"model": "default", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize(
    "change",
    [
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {"system": 3},
        {"messages": [{"role": "system", "content": "x"}]},
        {"metadata": {"user_id": "-starts-with-a-dash"}},
    ],
)
def test_anthropic_refusals(change: dict[str, Any]) -> None:
    with pytest.raises(RequestError):
        anthropic_ask({**ask_body(), **change})


def anthropic_turns(*turns: tuple[str, Any]) -> list[Any]:
    body = {**ask_body(), "messages": [{"role": r, "content": c} for r, c in turns]}
    return list(anthropic_ask(body).context.messages)


def test_anthropic_blocks_are_read_by_role() -> None:
    """Each role takes its own block types, in order: a user turn's tool results go before its
    text, an assistant's redacted thinking is dropped, anything else is refused by name."""
    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    hidden = {"type": "redacted_thinking", "data": "sealed"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "4"}],
    }
    _, answer, *user = anthropic_turns(
        ("user", "hi"),
        ("assistant", [hidden, call]),
        ("user", [{"type": "text", "text": "see"}, image, result]),
    )
    assert answer.content == (ToolCall(id="t1", name="f", arguments={}),)
    assert [type(m) for m in user] == [ToolResultMessage, UserMessage]
    assert user[0].content == (TextContent(text="4"),)
    assert [type(c) for c in user[1].content] == [TextContent, ImageContent]
    refused = [
        ("assistant", [image], "messages.1: unsupported assistant block 'image'"),
        ("user", [hidden], "messages.1: unsupported user block 'redacted_thinking'"),
        ("user", ["text"], "messages.1: unsupported user block None"),
        ("user", [{"type": ["text"]}], r"messages.1: unsupported user block \['text'\]"),
    ]
    for role, blocks, message in refused:
        with pytest.raises(RequestError, match=f"^{message}$"):
            anthropic_turns(
                ("user", "hi") if role == "assistant" else ("assistant", []), (role, blocks)
            )


def test_session_keys_are_checked() -> None:
    assert session_key("team.alice:42", "user") == "team.alice:42"
    assert session_key(None, "user") == ""
    for bad in ("a" * 200, "a\nb", 7, "../x"):
        with pytest.raises(RequestError):
            session_key(bad, "user")


def client_copy(message: AssistantMessage) -> AssistantMessage:
    """What an OpenAI client sends back: the text and the calls, no thinking, no marks."""
    content = [
        TextContent(text=b.text)
        if isinstance(b, TextContent)
        else dataclasses.replace(b, thought_signature=None)
        for b in message.content
        if isinstance(b, TextContent | ToolCall)
    ]
    return AssistantMessage(
        content=content, api="agy", provider="agy", model="", stop_reason="stop", timestamp=0
    )


def test_a_resent_answer_gets_its_marks_back_and_an_edited_one_does_not() -> None:
    memory = DeliveredMessages()
    question = UserMessage(content="hi", timestamp=0)
    answer = delivered("Hello!", ToolCall(id="c1", name="f", arguments={"a": 1}))
    memory.remember([question], answer)
    follow = UserMessage(content="more", timestamp=0)

    restored = memory.restore([question, client_copy(answer), follow])
    assert restored[1] is answer and restored[1].response_id == MARK

    edited = client_copy(dataclasses.replace(answer, content=[TextContent(text="Hello?")]))
    assert memory.restore([question, edited, follow])[1] is edited
    # The same answer after another question is another conversation's.
    other = UserMessage(content="hello", timestamp=0)
    assert memory.restore([other, client_copy(answer), follow])[1] is not answer


def test_the_memory_is_bounded_least_recently_used_first() -> None:
    memory = DeliveredMessages(bound=2)
    questions = [UserMessage(content=str(i), timestamp=0) for i in range(3)]
    answers = [delivered(f"answer {i}") for i in range(3)]
    for q, a in zip(questions, answers, strict=True):
        memory.remember([q], a)
    assert len(memory) == 2
    assert memory.restore([questions[0], client_copy(answers[0])])[1] is not answers[0]
    assert memory.restore([questions[2], client_copy(answers[2])])[1] is answers[2]


def test_structured_answers_are_parsed_and_checked() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert parse_structured('{"n": 3}', schema) == {"n": 3}
    assert parse_structured('```json\n{"n": 3}\n```', schema) == {"n": 3}
    with pytest.raises(StructuredOutputError, match="not JSON"):
        parse_structured("three", schema)
    with pytest.raises(StructuredOutputError, match="n"):
        parse_structured('{"n": "three"}', schema)


def test_a_structured_answer_after_words_is_read_from_its_last_block() -> None:
    from agy_provider.hosts.serve.turn import _structured

    schema = {"type": "object", "required": ["n"]}
    assert _structured(['{"n": ', "1}"], schema) == ({"n": 1}, '{"n": 1}')
    assert _structured(["Let me check. ", '{"n": 2}'], schema) == ({"n": 2}, '{"n": 2}')
    with pytest.raises(StructuredOutputError):
        _structured(["no JSON ", "at all"], schema)


def test_tool_results_carry_images_in_both_apis() -> None:
    call = {"id": "t1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
    image_url = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    openai = openai_ask(
        {
            "model": "default",
            "messages": [
                {"role": "user", "content": "Take a picture."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": "t1",
                    "content": [{"type": "text", "text": "ok"}, image_url],
                },
            ],
        }
    )
    use = {"type": "tool_use", "id": "t1", "name": "shot", "input": {}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    anthropic = anthropic_ask(
        {
            "model": "default",
            "messages": [
                {"role": "user", "content": "Take a picture."},
                {"role": "assistant", "content": [use]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "ok"}, image],
                        }
                    ],
                },
            ],
        }
    )
    for ask in (openai, anthropic):
        result = ask.context.messages[-1]
        assert isinstance(result, ToolResultMessage)
        assert list(result.content) == [
            TextContent(text="ok"),
            ImageContent(data=PNG, mime_type="image/png"),
        ]
    with pytest.raises(RequestError, match="unsupported tool_result block"):
        anthropic_ask(
            {
                "model": "default",
                "messages": [
                    {"role": "user", "content": "Take a picture."},
                    {"role": "assistant", "content": [use]},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [use]}],
                    },
                ],
            }
        )
