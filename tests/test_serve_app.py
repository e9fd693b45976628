"""`agy-provider serve` end to end: the real server on 127.0.0.1 (in-process uvicorn on a free
port) running agy-sim, driven by the real `openai` and `anthropic` SDKs and by raw httpx.

Expectations come from the scenario files; every test ends with no agy process left.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from host_helpers import until_agy_runs
from live_helpers import agy_processes
from live_helpers import scenario_answer
from serve_helpers import CITY
from serve_helpers import LOOKUP_ANTHROPIC
from serve_helpers import LOOKUP_OPENAI
from serve_helpers import Served
from serve_helpers import anthropic
from serve_helpers import openai
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)
from serve_helpers import until_no_agy

pytestmark = pytest.mark.slow

# --- the openai SDK --------------------------------------------------------------------------


async def test_openai_sdk_whole_and_streamed(served: Served) -> None:
    client = served.openai()
    answer = scenario_answer("default")
    whole = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}]
    )
    choice = whole.choices[0]
    assert (choice.message.content, choice.finish_reason) == (answer, "stop")
    assert choice.message.model_extra["reasoning_content"]  # agy's thinking, DeepSeek's field
    usage = whole.usage
    assert usage is not None and usage.completion_tokens > 0
    assert usage.prompt_tokens + usage.completion_tokens == usage.total_tokens

    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, reasoning, finish, streamed_usage = "", "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            streamed_usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            finish = c.finish_reason or finish
    assert (text, finish) == (answer, "stop")
    assert reasoning == choice.message.model_extra["reasoning_content"]
    assert streamed_usage is not None and streamed_usage.total_tokens == usage.total_tokens


async def test_openai_sdk_with_a_wrong_key_is_refused(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        await served.openai("not-the-token").chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}]
        )
    assert caught.value.status_code == 401
    assert not await asyncio.to_thread(agy_processes, served.app)  # no turn started
    models = await served.openai().models.list()
    assert "default" in [m.id for m in models.data]


async def test_openai_sdk_tool_round_trip_resumes_the_parked_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    client = served.openai()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is my order A-1042?"}]
    first = await client.chat.completions.create(
        model="default", messages=messages, tools=[LOOKUP_OPENAI]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "lookup_order"
    assert json.loads(call.function.arguments) == tool_arguments()
    messages += [
        choice.message.model_dump(exclude_none=True, exclude={"reasoning_content"}),
        {"role": "tool", "tool_call_id": call.id, "content": tool_output("A-1042")},
    ]
    second = await client.chat.completions.create(
        model="default", messages=messages, tools=[LOOKUP_OPENAI], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in second if c.choices])
    assert text == tool_answer()
    assert len(conversations(served.app)) == 1  # one agy turn, parked and resumed


async def test_agys_own_tool_runs_are_reasoning_never_tool_calls(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "tools")
    result = await served.openai().chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Look around"}],
        tools=[LOOKUP_OPENAI],
    )
    choice = result.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert "▸ run_command" in choice.message.model_extra["reasoning_content"]
    assert choice.message.content == scenario_answer("tools")


# --- the anthropic SDK ---------------------------------------------------------------------------


async def test_anthropic_sdk_whole_and_streamed(served: Served) -> None:
    client = served.anthropic()
    answer = scenario_answer("default")
    whole = await client.messages.create(
        model="default",
        max_tokens=1024,
        system="Be friendly.",
        messages=[{"role": "user", "content": "Hi"}],
    )
    kinds = [b.type for b in whole.content]
    assert kinds == ["thinking", "text"] and whole.stop_reason == "end_turn"
    assert whole.content[1].text == answer
    assert whole.usage.output_tokens > 0

    async with client.messages.stream(
        model="default", max_tokens=1024, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == answer
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.usage.output_tokens == whole.usage.output_tokens


async def test_anthropic_sdk_with_a_wrong_key_is_refused(served: Served) -> None:
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await served.anthropic("not-the-token").messages.create(
            model="default", max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
    assert caught.value.status_code == 401
    assert caught.value.body["error"]["type"] == "authentication_error"


async def test_anthropic_sdk_tool_round_trip(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    client = served.anthropic()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is my order A-1042?"}]
    first = await client.messages.create(
        model="default", max_tokens=1024, messages=messages, tools=[LOOKUP_ANTHROPIC]
    )
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("lookup_order", tool_arguments())
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": tool_output("A-1042")}
            ],
        },
    ]
    async with client.messages.stream(
        model="default", max_tokens=1024, messages=messages, tools=[LOOKUP_ANTHROPIC]
    ) as stream:
        final = await stream.get_final_message()
    assert "".join(b.text for b in final.content if b.type == "text") == tool_answer()
    assert len(conversations(served.app)) == 1


# --- conversations -------------------------------------------------------------------------------


async def test_a_resent_transcript_continues_its_conversation_and_an_edited_one_does_not(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    first = [{"role": "user", "content": "Count with me."}]
    one = await client.chat.completions.create(model="default", messages=first)
    said = one.choices[0].message.content
    assert said == scenario_answer("two-turn", 0)
    history = [*first, {"role": "assistant", "content": said}]
    two = await client.chat.completions.create(
        model="default", messages=[*history, {"role": "user", "content": "Go on."}]
    )
    assert two.choices[0].message.content == scenario_answer("two-turn", 1)  # agy's turn 2
    assert len(conversations(served.app)) == 1

    edited = [*first, {"role": "assistant", "content": said + " Three."}]
    again = await client.chat.completions.create(
        model="default", messages=[*edited, {"role": "user", "content": "Go on."}]
    )
    # Not proven: a new conversation carrying the history, never a guess.
    assert again.choices[0].message.content == scenario_answer("two-turn", 0)
    assert len(conversations(served.app)) == 2


async def test_an_anthropic_transcript_continues_across_requests(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.anthropic()
    first: list[dict[str, Any]] = [{"role": "user", "content": "Count with me."}]
    one = await client.messages.create(model="default", max_tokens=64, messages=first)
    resent = [*first, {"role": "assistant", "content": [b.model_dump() for b in one.content]}]
    two = await client.messages.create(
        model="default",
        max_tokens=64,
        messages=[*resent, {"role": "user", "content": "Go on."}],
        metadata={"user_id": "counting-client"},
    )
    assert two.content[-1].text == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 1


# --- structured output ---------------------------------------------------------------------------


async def test_structured_output_is_validated_before_it_is_returned(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    expected = json.loads(scenario_answer("structured-output"))
    client = served.openai()
    spec = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    whole = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Paris?"}], response_format=spec
    )
    assert json.loads(whole.choices[0].message.content or "") == expected

    stricter = {**CITY, "required": ["city", "population", "country"]}
    with pytest.raises(openai.APIStatusError, match="does not match the JSON schema"):
        await client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Paris?"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "c", "schema": stricter},
            },
        )
    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Paris?"}],
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": stricter}},
    )
    with pytest.raises(openai.APIError, match="does not match the JSON schema"):
        async for _ in stream:
            pass
    forced = await served.anthropic().messages.create(
        model="default",
        max_tokens=256,
        messages=[{"role": "user", "content": "Paris?"}],
        tools=[{"name": "record_city", "input_schema": CITY}],
        tool_choice={"type": "tool", "name": "record_city"},
    )
    (use,) = [b for b in forced.content if b.type == "tool_use"]
    assert (use.name, use.input, forced.stop_reason) == ("record_city", expected, "tool_use")


# --- many clients, and clients that leave ------------------------------------------------------


async def test_concurrent_streaming_clients_each_get_their_answer(served: Served) -> None:
    client = served.anthropic()

    async def one() -> str:
        async with client.messages.stream(
            model="default", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            return "".join([t async for t in stream.text_stream])

    answers = await asyncio.gather(*(one() for _ in range(6)))
    assert answers == [scenario_answer("default")] * 6


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_a_client_leaving_mid_stream_aborts_its_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    body = {
        "model": "default",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "Take your time."}],
    }
    async with (
        httpx.AsyncClient(base_url=served.base, headers=served.headers(), timeout=60) as http,
        http.stream("POST", path, json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if "thinking" in line or "reasoning_content" in line:
                assert await asyncio.to_thread(agy_processes, served.app)  # agy is mid-turn
                break
    # The client is gone: its turn is aborted and agy's tree ended (no time asserted).
    await until_no_agy(served.app)


async def test_a_whole_request_whose_client_leaves_aborts_its_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    body = {"model": "default", "messages": [{"role": "user", "content": "Take your time."}]}
    async with httpx.AsyncClient(base_url=served.base, headers=served.headers()) as http:
        request = asyncio.ensure_future(http.post("/v1/chat/completions", json=body, timeout=60))
        await until_agy_runs(served.app)
        request.cancel()  # the client closes its connection mid-turn
        with pytest.raises(asyncio.CancelledError):
            await request
    await until_no_agy(served.app)
