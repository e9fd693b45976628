"""The Responses API's request side and forced tool choices, pure: Responses bodies as pi
contexts (items grouped into messages, system texts, keys, effort, formats), refusals naming the
field, OpenAI `tool_choice` forcing a tool (one, or one of several by an `anyOf` on its name),
and the bounded memory of responses."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import forced_tools
from agy_provider.hosts.serve.convert import openai_ask
from agy_provider.hosts.serve.owners import owner_of
from agy_provider.hosts.serve.responses import RememberedResponses
from agy_provider.hosts.serve.responses import responses_usage
from agy_provider.hosts.serve.responses_ask import REFUSED_FIELDS
from agy_provider.hosts.serve.responses_ask import Continued
from agy_provider.hosts.serve.responses_ask import responses_ask
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import Tool
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import Usage
from agy_provider.pi.types import UserMessage

PNG = "iVBORw0KGgo="
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ORDER = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}


def chat(**fields: Any) -> dict[str, Any]:
    tools = [
        {"type": "function", "function": {"name": "city", "parameters": CITY}},
        {"type": "function", "function": {"name": "order", "parameters": ORDER}},
    ]
    return {
        "model": "default",
        "messages": [{"role": "user", "content": "x"}],
        "tools": tools,
        **fields,
    }


# --- forced tool choices ---------------------------------------------------------------------------


def test_a_named_or_only_required_tool_is_the_answers_schema() -> None:
    named = openai_ask(chat(tool_choice={"type": "function", "function": {"name": "order"}}))
    assert (named.json_schema, named.forced_tool, named.forced_any) == (ORDER, "order", False)
    assert named.context.tools is None  # the forced tool is the answer's shape, not a tool
    alone = openai_ask({**chat(tool_choice="required"), "tools": chat()["tools"][:1]})
    assert (alone.json_schema, alone.forced_tool) == (CITY, "city")
    auto = openai_ask(chat(tool_choice="auto"))
    assert auto.json_schema is None and auto.context.tools is not None
    assert not auto.forced_tool and not auto.forced_any
    assert openai_ask(chat(tool_choice="none")).context.tools is None


def test_required_among_several_tools_asks_for_one_named_call() -> None:
    ask = openai_ask(chat(tool_choice="required"))
    assert (ask.forced_tool, ask.forced_any) == ("", True)
    assert ask.json_schema is not None
    validator = jsonschema.Draft202012Validator(ask.json_schema)
    validator.check_schema(ask.json_schema)
    assert validator.is_valid({"name": "city", "arguments": {"city": "Paris"}})
    assert validator.is_valid({"name": "order", "arguments": {"id": "A-1"}})
    assert not validator.is_valid({"name": "city", "arguments": {"id": "A-1"}})  # wrong tool's
    assert not validator.is_valid({"name": "weather", "arguments": {}})
    assert not validator.is_valid({"city": "Paris"})


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required", "tools": None}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
        (
            {"tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
        ),
    ],
)
def test_forced_choices_that_cannot_hold_are_refused(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        openai_ask(chat(**fields))
    assert caught.value.param == param


def test_forced_tools_refuses_an_unknown_name() -> None:
    with pytest.raises(RequestError, match="no tool named 'x'"):
        forced_tools([Tool("a", "", CITY)], "x")


# --- Responses requests ----------------------------------------------------------------------------


def test_a_string_input_with_instructions() -> None:
    asked = responses_ask(
        {"model": "agy/default", "input": "Hi", "instructions": "Be brief.", "stream": True}
    )
    ask = asked.ask
    assert (ask.model, ask.stream, ask.context.system_prompt) == ("default", True, "Be brief.")
    assert [m.content for m in ask.context.messages] == ["Hi"]
    assert asked.store and asked.echo["tool_choice"] == "auto"


def test_items_become_pi_messages() -> None:
    mark = "agy-provider:1:conv:token"
    asked = responses_ask(
        {
            "model": "default",
            "instructions": "First.",
            "input": [
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "Dev."}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Look:"},
                        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    ],
                },
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "hmm"}],
                    "encrypted_content": mark,
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me check."}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
            "reasoning": {"effort": "high", "summary": "auto"},
        }
    )
    ask = asked.ask
    assert ask.context.system_prompt == "First.\n\nDev."
    assert ask.reasoning == "high"
    user, answer, result = ask.context.messages
    assert isinstance(user, UserMessage)
    assert [type(c) for c in user.content] == [TextContent, ImageContent]
    assert isinstance(answer, AssistantMessage) and answer.stop_reason == "toolUse"
    thinking, text, call = answer.content
    assert isinstance(thinking, ThinkingContent) and thinking.thinking_signature == mark
    assert isinstance(text, TextContent) and text.text == "Let me check."
    assert call == ToolCall(id="c1", name="f", arguments={"a": 1})
    assert isinstance(result, ToolResultMessage)
    assert (result.tool_name, list(result.content)) == ("f", [TextContent(text="42")])
    assert asked.system == ("Dev.",)  # instructions are not carried to a continuing response


def test_a_continued_response_prefixes_its_transcript_and_knows_its_calls() -> None:
    call = ToolCall(id="c9", name="lookup", arguments={})
    answer = AssistantMessage(
        content=[call], api="agy", provider="agy", model="m", stop_reason="toolUse", timestamp=0
    )
    previous = Continued((UserMessage(content="Where?", timestamp=0), answer), ("Dev.",), "k1")
    asked = responses_ask(
        {
            "model": "default",
            "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c9", "output": "here"}],
        },
        previous,
    )
    messages = asked.ask.context.messages
    assert list(messages[:2]) == list(previous.transcript)
    assert isinstance(messages[2], ToolResultMessage) and messages[2].tool_name == "lookup"
    assert asked.ask.context.system_prompt == "Dev."
    with pytest.raises(RequestError, match="call_id"):
        responses_ask(
            {"model": "default", "input": [{"type": "function_call_output", "call_id": "zz"}]}
        )


def test_conversation_keys_are_the_owner_rules_user_first_then_prompt_cache_key_digested() -> None:
    base = {"model": "default", "input": "x"}
    # The converter names no key: whose request it is, `serve_owners.owner_of` says, as for
    # every API.
    assert responses_ask({**base, "prompt_cache_key": "019a-uuid"}).ask.session_key == ""
    assert owner_of({**base, "prompt_cache_key": "019a-uuid"}, {}).key == "019a-uuid"
    odd = owner_of({**base, "prompt_cache_key": "has spaces & more"}, {}).key
    assert odd.startswith("h-") and " " not in odd
    assert owner_of({**base, "prompt_cache_key": "p", "user": "u-1"}, {}).key == "u-1"


def test_text_formats_and_tools() -> None:
    base = {"model": "default", "input": "x"}
    schema = responses_ask(
        {**base, "text": {"format": {"type": "json_schema", "name": "c", "schema": CITY}}}
    )
    assert schema.ask.json_schema == CITY
    assert responses_ask({**base, "text": {"format": {"type": "json_object"}}}).ask.json_schema == {
        "type": "object"
    }
    assert responses_ask({**base, "text": {"verbosity": "low"}}).ask.json_schema is None
    tools = [{"type": "function", "name": "city", "parameters": CITY}]
    forced = responses_ask(
        {**base, "tools": tools, "tool_choice": {"type": "function", "name": "city"}}
    )
    assert (forced.ask.forced_tool, forced.ask.json_schema, forced.ask.context.tools) == (
        "city",
        CITY,
        None,
    )
    with pytest.raises(RequestError) as caught:
        responses_ask(
            {
                **base,
                "tools": tools,
                "tool_choice": "required",
                "text": {"format": {"type": "json_object"}},
            }
        )
    assert caught.value.param == "text.format"


@pytest.mark.parametrize("field", sorted(REFUSED_FIELDS))
def test_meaning_changing_fields_are_refused(field: str) -> None:
    with pytest.raises(RequestError) as caught:
        responses_ask({"model": "default", "input": "x", field: 3})
    assert caught.value.param == field


def test_routine_fields_are_accepted() -> None:
    asked = responses_ask(
        {
            "model": "default",
            "input": "x",
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "metadata": {"a": "b"},
            "client_metadata": {"originator": "codex"},
            "parallel_tool_calls": False,
            "temperature": 0.2,
            "top_p": 1,
            "max_output_tokens": 1000,
            "truncation": "auto",
            "service_tier": "auto",
            "background": False,
        }
    )
    assert not asked.store and "reasoning.encrypted_content" in asked.include
    assert asked.echo["metadata"] == {"a": "b"} and asked.echo["parallel_tool_calls"] is False


def test_remembered_responses_are_bounded_and_deletable() -> None:
    memory = RememberedResponses(bound=2)
    for n in range(3):
        memory.remember({"id": f"r{n}"}, Continued((), (), ""))
    assert memory.get("r0") is None and memory.get("r2") == {"id": "r2"}
    assert memory.continued("r1") is not None
    assert memory.delete("r1") and not memory.delete("r1")
    assert len(memory) == 1


def test_usage_in_the_responses_shape() -> None:
    usage = responses_usage(
        Usage(input=10, output=5, cache_read=100, cache_write=1, total_tokens=116)
    )
    assert usage["input_tokens"] + usage["output_tokens"] == usage["total_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] == 100


def test_namespaced_tools_are_offered_by_name_and_hosted_web_search_is_agys_own() -> None:
    inner = {"type": "function", "name": "spawn", "parameters": ORDER}
    asked = responses_ask(
        {
            "model": "default",
            "input": "x",
            "tools": [
                {"type": "function", "name": "city", "parameters": CITY},
                {"type": "namespace", "name": "agents", "description": "", "tools": [inner]},
                {"type": "web_search", "external_web_access": False},
            ],
        }
    )
    assert [t.name for t in asked.ask.context.tools or ()] == ["city", "spawn"]
    assert asked.namespaces == {"spawn": "agents"}
    with pytest.raises(RequestError, match="more than one tool is named 'spawn'"):
        responses_ask({"model": "default", "input": "x", "tools": [inner, inner]})
    with pytest.raises(RequestError, match="only function tools"):
        responses_ask(
            {"model": "default", "input": "x", "tools": [{"type": "custom", "name": "p"}]}
        )


def _writer(stop_reason: Any, content: list[Any], **ask: Any) -> tuple[Any, AssistantMessage]:
    from agy_provider.hosts.serve.responses import ResponseWriter
    from agy_provider.hosts.serve.turn import RunningTurn
    from agy_provider.hosts.serve.turn import ServeTurns
    from agy_provider.pi.options import AbortSignal
    from agy_provider.pi.stream import AssistantMessageEventStream

    asked = responses_ask({"model": "default", "input": "x", **ask})
    turn = RunningTurn(
        asked.ask, AssistantMessageEventStream(), AbortSignal(), ServeTurns(agy_bin=None, cwd=None)
    )
    message = AssistantMessage(
        content=content, api="agy", provider="agy", model="m", stop_reason=stop_reason, timestamp=0
    )
    return ResponseWriter(turn, asked, RememberedResponses()), message


def test_a_cut_off_or_withheld_answer_is_incomplete() -> None:
    writer, message = _writer("length", [TextContent(text="Half an ans")])
    response = writer.whole(message)
    assert (response["status"], response["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    writer, message = _writer("stop", [ThinkingContent(thinking="", redacted=True)])
    assert writer.whole(message)["incomplete_details"] == {"reason": "content_filter"}
    writer, message = _writer("stop", [TextContent(text="Done.")])
    done = writer.whole(message)
    assert (done["status"], done["output"][0]["content"][0]["text"]) == ("completed", "Done.")
    assert writer.memory.get(done["id"]) is done  # remembered: store was not false


def test_a_sealed_reasoning_item_carries_the_owners_signature_only_when_included() -> None:
    mark = "agy-provider:1:conv:token"
    thinking = ThinkingContent(thinking="hmm", thinking_signature=mark)
    plain, message = _writer("stop", [thinking], store=False)
    response = plain.whole(message)
    assert "encrypted_content" not in response["output"][0]
    assert plain.memory.get(response["id"]) is None  # store=false: not remembered
    sealed, message = _writer("stop", [thinking], include=["reasoning.encrypted_content"])
    seal = sealed.whole(message)["output"][0]["encrypted_content"]
    # The server's signature of the thinking for its owner, never the provider's raw mark.
    assert seal != mark and sealed.turn.turns.owners.signer.verify("", "hmm", seal)


def test_a_quota_failure_is_insufficient_quota_and_any_other_a_server_error() -> None:
    writer, message = _writer("error", [])
    quota = writer.failed(message, lambda m: (429, "agy failed: RESOURCE_EXHAUSTED (code 429)"))
    assert quota["status"] == "failed" and quota["error"]["code"] == "insufficient_quota"
    other = writer.failed(message, lambda m: (502, "agy crashed"))
    assert other["error"] == {"code": "server_error", "message": "agy crashed"}
