"""`POST /v1/responses` on `agy-provider serve` end to end: the real server on 127.0.0.1 running
agy-sim, driven by the real `openai` SDK (`responses.create`, `.stream`, `.parse`) and by raw
httpx for Codex's request shape; forced tool choices in both OpenAI APIs; the three APIs giving
the same turn.

Expectations come from the scenario files; every test ends with no agy process left.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from host_helpers import TOOL_PARAMETERS
from host_helpers import TOOL_SCENARIO
from host_helpers import conversations
from host_helpers import tool_answer
from host_helpers import tool_arguments
from host_helpers import tool_output
from live_helpers import agy_processes
from live_helpers import leftovers
from live_helpers import scenario_answer
from serve_helpers import CITY
from serve_helpers import LOOKUP_ANTHROPIC
from serve_helpers import LOOKUP_OPENAI
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)
from serve_helpers import start_server
from serve_helpers import until_no_agy

pytestmark = pytest.mark.slow

openai = pytest.importorskip(
    "openai", reason="the serve extra is not installed (pip install -e '.[serve]')"
)
pydantic = pytest.importorskip("pydantic")

LOOKUP = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look up an order's status by its id.",
    "parameters": TOOL_PARAMETERS,
}


class City(pydantic.BaseModel):  # type: ignore[name-defined,misc]
    city: str
    population: int


async def raw_events(served: Served, body: dict[str, Any], **headers: str) -> list[dict[str, Any]]:
    """A streamed request's events as sent, each checked against its SSE `event:` line."""
    events: list[dict[str, Any]] = []
    name = None
    async with (
        httpx.AsyncClient(
            base_url=served.base, headers={**served.headers(), **headers}, timeout=60
        ) as http,
        http.stream("POST", "/v1/responses", json={**body, "stream": True}) as response,
    ):
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["type"] == name
                events.append(event)
    return events


# --- the openai SDK ------------------------------------------------------------------------------


async def test_create_whole_and_stream_with_the_sdks_helper(served: Served) -> None:
    client = served.openai()
    answer = scenario_answer("default")
    whole = await client.responses.create(model="default", input="Hi", instructions="Be brief.")
    assert (whole.status, whole.output_text) == ("completed", answer)
    assert [item.type for item in whole.output] == ["reasoning", "message"]
    assert whole.output[0].summary[0].text  # agy's thinking as the reasoning summary
    usage = whole.usage
    assert usage is not None and usage.output_tokens > 0
    assert usage.input_tokens + usage.output_tokens == usage.total_tokens
    assert usage.input_tokens_details.cached_tokens >= 0
    assert usage.output_tokens_details.reasoning_tokens == 0  # agy's split is not carried
    assert whole.instructions == "Be brief."

    kinds: list[str] = []
    async with client.responses.stream(model="default", input="Hi") as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_response()
    assert final.output_text == answer
    assert final.output[0].summary[0].text == whole.output[0].summary[0].text
    assert final.usage is not None and final.usage.total_tokens == usage.total_tokens
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in (
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_part.done",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kind in kinds

    events = await raw_events(
        served, {"model": "default", "input": "Hi", "include": ["reasoning.encrypted_content"]}
    )
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    # The server's signature of the thinking rides in the final object's reasoning item, as in
    # Anthropic's thinking blocks (`serve_owners`), never the provider's raw mark.
    reasoning = events[-1]["response"]["output"][0]
    assert reasoning["encrypted_content"].startswith("agy1.")


async def test_a_function_call_ends_the_response_and_its_output_resumes_the_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    client = served.openai()
    first = await client.responses.create(
        model="default", input="Where is my order A-1042?", tools=[LOOKUP]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("lookup_order", tool_arguments())
    assert first.status == "completed"
    output = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": tool_output("A-1042"),
    }
    async with client.responses.stream(
        model="default", previous_response_id=first.id, input=[output], tools=[LOOKUP]
    ) as stream:
        final = await stream.get_final_response()
    assert final.output_text == tool_answer()
    assert len(conversations(served.app)) == 1  # one agy turn, parked and resumed

    # The same round trip with every item resent and no previous_response_id.
    streamed = await raw_events(
        served, {"model": "default", "input": "Where is my order A-1042?", "tools": [LOOKUP]}
    )
    done = [e["item"] for e in streamed if e["type"] == "response.output_item.done"]
    (resent_call,) = [i for i in done if i["type"] == "function_call"]
    again = await client.responses.create(
        model="default",
        input=[
            {"role": "user", "content": "Where is my order A-1042?"},
            *done,
            {**output, "call_id": resent_call["call_id"]},
        ],
        tools=[LOOKUP],
    )
    assert again.output_text == tool_answer()
    assert len(conversations(served.app)) == 2


async def test_a_namespaced_tools_call_names_its_namespace(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", TOOL_SCENARIO)
    orders = {"type": "namespace", "name": "orders", "description": "Orders.", "tools": [LOOKUP]}
    events = await raw_events(
        served, {"model": "default", "input": "Where is my order A-1042?", "tools": [orders]}
    )
    (call,) = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert (call["namespace"], call["name"]) == ("orders", "lookup_order")
    assert events[-1]["response"]["output"][-1]["namespace"] == "orders"


async def test_parse_with_a_pydantic_model_and_a_failed_check(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    expected = json.loads(scenario_answer("structured-output"))
    client = served.openai()
    parsed = await client.responses.parse(model="default", input="Paris?", text_format=City)
    assert parsed.output_parsed == City(**expected)
    shaped = await client.responses.create(
        model="default", input="Paris?", text={"format": {"type": "json_object"}}
    )
    assert json.loads(shaped.output_text) == expected

    stricter = {**CITY, "required": ["city", "population", "country"]}
    text = {"format": {"type": "json_schema", "name": "c", "schema": stricter}}
    with pytest.raises(openai.APIStatusError, match="does not match the JSON schema"):
        await client.responses.create(model="default", input="Paris?", text=text)
    events = await raw_events(served, {"model": "default", "input": "Paris?", "text": text})
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["code"] == "server_error"
    assert "does not match" in failed["response"]["error"]["message"]


async def test_previous_response_id_continues_and_get_delete_remember_it(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    client = served.openai()
    one = await client.responses.create(model="default", input="Count with me.")
    assert one.output_text == scenario_answer("two-turn", 0)
    two = await client.responses.create(
        model="default", input="Go on.", previous_response_id=one.id
    )
    assert two.output_text == scenario_answer("two-turn", 1)  # agy's turn 2
    assert len(conversations(served.app)) == 1
    fetched = await client.responses.retrieve(two.id)
    assert (fetched.id, fetched.output_text) == (two.id, two.output_text)
    await client.responses.delete(two.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(two.id)

    unstored = await client.responses.create(model="default", input="Count.", store=False)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        await client.responses.create(
            model="default", input="Go on.", previous_response_id=unstored.id
        )


async def test_codex_request_shape_streams_and_resent_items_continue(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex's request (issue 30): developer and user items, 9 function tools, reasoning
    summary, store false, include, prompt_cache_key, client_metadata, its turn header."""
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": name,
            "description": f"Codex's {name} tool.",
            "strict": False,
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        }
        for name in (
            "shell",
            "apply_patch",
            "update_plan",
            "view_image",
            "list_mcp_resources",
            "list_mcp_resource_templates",
            "read_mcp_resource",
            "web_fetch",
            "request_user_input",
        )
    ]
    # Codex 0.171 also groups tools in a namespace and offers the hosted web search.
    grouped = tools.pop()
    tools += [
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "Agents.",
            "tools": [grouped],
        },
        {"type": "web_search", "external_web_access": False},
    ]
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Count"}]}
    body: dict[str, Any] = {
        "model": "default",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>none</permissions>"}],
            },
            user,
        ],
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a3c1e-8f2b-7c40-b5de-2f0c8e9a1d11",
        "client_metadata": {"originator": "codex_exec"},
    }
    header = {"x-codex-turn-metadata": json.dumps({"turn_id": "t1"})}
    events = await raw_events(served, body, **header)
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert completed["response"]["id"].startswith("resp_")
    assert completed["response"]["usage"]["output_tokens"] > 0
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in items] == ["reasoning", "message"]
    assert items[1]["content"][0]["text"] == scenario_answer("two-turn", 0)

    # Codex's next turn: everything resent (its reasoning items included), one more user item.
    more = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "On"}]}
    body["input"] = [*body["input"], *items, more]
    events = await raw_events(served, body, **header)
    said = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert said == scenario_answer("two-turn", 1)
    assert len(conversations(served.app)) == 1


async def test_a_client_leaving_mid_stream_aborts_its_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    body = {"model": "default", "stream": True, "input": "Take your time."}
    async with (
        httpx.AsyncClient(base_url=served.base, headers=served.headers(), timeout=60) as http,
        http.stream("POST", "/v1/responses", json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if "reasoning_summary_text.delta" in line:
                assert await asyncio.to_thread(agy_processes, served.app)  # agy is mid-turn
                break
    await until_no_agy(served.app)  # the client is gone: its turn aborted, agy's tree ended


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("background", True),
        ("conversation", "conv_1"),
        ("tools", [{"type": "file_search", "vector_store_ids": ["vs_1"]}]),
        ("input", [{"type": "item_reference", "id": "msg_1"}]),
        ("tool_choice", {"type": "allowed_tools", "mode": "auto", "tools": []}),
    ],
)
async def test_meaning_changing_fields_are_refused_in_openais_shape(
    served: Served, field: str, value: Any
) -> None:
    body = {"model": "default", "input": "Hi", field: value}
    with pytest.raises(openai.BadRequestError) as caught:
        await served.openai().responses.create(**body)
    assert caught.value.body["param"].split("[")[0] in (field, "input")
    assert not conversations(served.app)  # no turn started


# --- forced tool choices (Chat Completions and Responses) --------------------------------------


async def test_forced_tool_choices_end_in_a_call_of_that_tool(
    served: Served, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "structured-output")
    expected = json.loads(scenario_answer("structured-output"))
    client = served.openai()
    record = {"type": "function", "function": {"name": "record_city", "parameters": CITY}}
    named = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Paris?"}],
        tools=[record, LOOKUP_OPENAI],
        tool_choice={"type": "function", "function": {"name": "record_city"}},
    )
    choice = named.choices[0]
    (call,) = choice.message.tool_calls or []
    assert (choice.finish_reason, call.function.name) == ("tool_calls", "record_city")
    assert json.loads(call.function.arguments) == expected
    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Paris?"}],
        tools=[record],
        tool_choice="required",
        stream=True,
    )
    calls: list[Any] = []
    finish = None
    async for chunk in stream:
        for c in chunk.choices:
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and [c.function.name for c in calls] == ["record_city"]

    response = await client.responses.create(
        model="default",
        input="Paris?",
        tools=[{"type": "function", "name": "record_city", "parameters": CITY}, LOOKUP],
        tool_choice={"type": "function", "name": "record_city"},
    )
    (item,) = [i for i in response.output if i.type == "function_call"]
    assert (item.name, json.loads(item.arguments)) == ("record_city", expected)

    # `required` among several tools: agy answers {"name", "arguments"} of one of them.
    scenario = json.loads(
        (
            Path(__file__).parent.parent / "agy_provider/sim/scenarios/structured-output.json"
        ).read_text()
    )
    said = json.dumps({"name": "record_city", "arguments": expected})
    scenario["turns"][0]["steps"][0]["text"] = [said]
    path = tmp_path / "choose-a-tool.json"
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(path))
    chosen = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Paris?"}],
        tools=[LOOKUP_OPENAI, record],
        tool_choice="required",
    )
    (call,) = chosen.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("record_city", expected)


# --- one turn, three APIs --------------------------------------------------------------------------


async def _chat(served: Served, tools: bool) -> dict[str, Any]:
    extra = {"tools": [LOOKUP_OPENAI]} if tools else {}
    stream = await served.openai().chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Where is my order A-1042?"}],
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    text, thinking, calls, usage = "", "", [], None
    async for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
            thinking += (c.delta.model_extra or {}).get("reasoning_content") or ""
            calls += [
                (t.function.name, json.loads(t.function.arguments))
                for t in c.delta.tool_calls or []
            ]
    assert usage is not None
    return {"text": text, "thinking": thinking, "calls": calls, "total": usage.total_tokens}


async def _messages(served: Served, tools: bool) -> dict[str, Any]:
    extra = {"tools": [LOOKUP_ANTHROPIC]} if tools else {}
    async with served.anthropic().messages.stream(
        model="default",
        max_tokens=1024,
        messages=[{"role": "user", "content": "Where is my order A-1042?"}],
        **extra,
    ) as stream:
        final = await stream.get_final_message()
    usage = final.usage
    return {
        "text": "".join(b.text for b in final.content if b.type == "text"),
        "thinking": "\n\n".join(b.thinking for b in final.content if b.type == "thinking"),
        "calls": [(b.name, b.input) for b in final.content if b.type == "tool_use"],
        "total": usage.input_tokens
        + usage.output_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0),
    }


async def _responses(served: Served, tools: bool) -> dict[str, Any]:
    extra = {"tools": [LOOKUP]} if tools else {}
    async with served.openai().responses.stream(
        model="default", input="Where is my order A-1042?", **extra
    ) as stream:
        final = await stream.get_final_response()
    assert final.usage is not None
    return {
        "text": final.output_text,
        "thinking": "\n\n".join(
            p.text for i in final.output if i.type == "reasoning" for p in i.summary
        ),
        "calls": [
            (i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"
        ],
        "total": final.usage.total_tokens,
    }


@pytest.mark.parametrize("scenario", ["default", TOOL_SCENARIO])
async def test_the_three_apis_give_the_same_turn(
    served: Served, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", scenario)
    tools = scenario == TOOL_SCENARIO
    seen = {
        api: await read(served, tools)
        for api, read in (("chat", _chat), ("messages", _messages), ("responses", _responses))
    }
    assert seen["chat"] == seen["messages"] == seen["responses"], seen
    if tools:
        assert seen["chat"]["calls"] == [("lookup_order", tool_arguments())]
        assert seen["chat"]["text"] == ""
    else:
        assert seen["chat"]["text"] == scenario_answer("default")
    assert seen["chat"]["thinking"] and seen["chat"]["total"] > 0


async def test_our_sealed_reasoning_continues_a_conversation_on_its_server_only(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resent reasoning item sealed by this server (`include: reasoning.encrypted_content`)
    continues the agy conversation; a restarted server cannot verify it (its secret is new), so
    the same items start a new conversation carrying the history, as a resent Anthropic
    transcript does: a client's seal never names a conversation by itself."""
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    first = {"role": "user", "content": "Count with me."}
    body: dict[str, Any] = {
        "model": "default",
        "input": [first],
        "include": ["reasoning.encrypted_content"],
    }
    served, stop, task = await start_server(live_env)
    try:
        for turn in (0, 1):
            response = await served.openai().responses.create(**body)
            assert response.output_text == scenario_answer("two-turn", turn)
            items = [item.model_dump(exclude_none=True) for item in response.output]
            seals = [i["encrypted_content"] for i in items if i["type"] == "reasoning"]
            assert all(m.startswith("agy1.") for m in seals) and (seals or turn)
            body["input"] = [*body["input"], *items, {"role": "user", "content": "Go on."}]
    finally:
        stop.set()
        await task
    assert len(conversations(live_env)) == 1
    served, stop, task = await start_server(live_env)
    try:
        response = await served.openai().responses.create(**body)
    finally:
        stop.set()
        await task
    assert response.output_text == scenario_answer("two-turn", 0)
    assert len(conversations(live_env)) == 2
    assert not leftovers(live_env)
