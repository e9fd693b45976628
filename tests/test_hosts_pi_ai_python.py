"""agy as a pi-ai-python provider, with the real `pi_ai` and `pi_agent` (extra `hosts`) on agy-sim:
a turn through `Models`, a two-prompt `pi_agent.Agent` (one agy conversation), and aborts
through pi_ai's AbortController and the Agent's own `abort()`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from host_helpers import conversations
from host_helpers import slow_start_scenario
from host_helpers import until_agy_runs
from live_helpers import agy_sim_path
from live_helpers import leftovers
from live_helpers import scenario_answer
from optional import need

from agy_provider.agy.models import list_models
from agy_provider.live.provider import wait_for_turns

pi_ai = need("pi_ai", "pi-ai-python", "hosts")
pi_agent = need("pi_agent", "pi-ai-python", "hosts")
from pi_ai.abort import AbortController  # noqa: E402
from pi_ai.types import Context  # noqa: E402
from pi_ai.types import UserMessage  # noqa: E402

from agy_provider.hosts.pi_ai_python import provider  # noqa: E402

pytestmark = pytest.mark.slow


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if getattr(block, "type", "") == "text")


def agy_models() -> Any:
    models = pi_ai.create_models()
    models.set_provider(provider())
    return models


def test_the_provider_serves_agys_models(live_env: Path) -> None:
    models = agy_models()
    listed = [m.id for m in models.get_models("agy")]
    assert listed == ["default", *(m.id for m in list_models(agy_sim_path()))]
    model = models.get_model("agy", listed[1])
    assert model is not None and model.provider == "agy" and model.api == "agy"


async def test_a_turn_through_models(live_env: Path) -> None:
    models = agy_models()
    model = models.get_model("agy", "gemini-3.7-flash")
    stream = models.stream_simple(
        model, Context(messages=[UserMessage("hello")], system_prompt="Be brief.")
    )
    kinds = [event.type async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    assert kinds[0] == "start" and kinds[-1] == "done" and "text_delta" in kinds
    assert message.stop_reason == "stop" and text_of(message) == scenario_answer("default")
    assert message.usage.input > 0
    assert leftovers(live_env) == []


@pytest.mark.parametrize("session_id", ["pi-ai-python-agent", None])
async def test_a_two_prompt_agent_is_one_agy_conversation(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, session_id: str | None
) -> None:
    # pi-ai-python's Agent sets no session id by default: the mark on agy's message continues.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    models = agy_models()
    agent = pi_agent.Agent(
        initial_state={"model": models.get_model("agy", "gemini-3.7-flash")},
        stream_fn=models,
        session_id=session_id,
    )
    await agent.prompt("count with me")
    await agent.prompt("next")
    await wait_for_turns()
    answers = [text_of(m) for m in agent.state.messages if getattr(m, "role", "") == "assistant"]
    assert answers == [scenario_answer("two-turn", 0), scenario_answer("two-turn", 1)]
    assert len(conversations(live_env)) == 1
    assert leftovers(live_env) == []


async def test_pi_ai_abort_controller_aborts_the_turn(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    models = agy_models()
    controller = AbortController()
    stream = models.stream_simple(
        models.get_model("agy", "default"),
        Context(messages=[UserMessage("hi")]),
        signal=controller.signal,
    )
    consumer = asyncio.ensure_future(stream.result())
    await until_agy_runs(live_env)
    controller.abort()
    message = await asyncio.wait_for(consumer, 60)
    await wait_for_turns()
    assert message.stop_reason == "aborted" and message.error_message
    assert leftovers(live_env, recorder) == []


async def test_the_agents_own_abort(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    models = agy_models()
    agent = pi_agent.Agent(
        initial_state={"model": models.get_model("agy", "default")}, stream_fn=models
    )
    running = asyncio.ensure_future(agent.prompt("hi"))
    await until_agy_runs(live_env)
    agent.abort()
    await asyncio.wait_for(running, 60)
    await wait_for_turns()
    last = agent.state.messages[-1]
    assert last.role == "assistant" and last.stop_reason == "aborted"
    assert leftovers(live_env, recorder) == []


async def test_closing_the_hosts_stream_stops_agy(
    live_env: Path, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", str(slow_start_scenario(tmp_path)))
    models = agy_models()
    stream = models.stream_simple(
        models.get_model("agy", "default"), Context(messages=[UserMessage("hi")])
    )
    first = await stream.__anext__()
    assert first.type == "start"
    await until_agy_runs(live_env)
    await stream.aclose()
    await wait_for_turns()
    assert leftovers(live_env, recorder) == []


async def test_misuse_is_an_error_event_not_an_exception(live_env: Path) -> None:
    models = agy_models()
    model = models.get_model("agy", "default")
    # An option agy-provider refuses (pi_ai's own contract: the stream never raises).
    stream = models.stream_simple(model, Context(messages=[UserMessage("hi")]), session_id=42)
    message = await stream.result()
    assert message.stop_reason == "error"
    assert "options.session_id: expected a string" in (message.error_message or "")
    # A conversation agy cannot take: an image that is not what it says (two bytes, not a PNG).
    image = {"type": "image", "data": "AA", "mimeType": "image/png"}
    stream = models.stream_simple(
        model, {"messages": [{"role": "user", "content": [image], "timestamp": 0}]}
    )
    message = await stream.result()
    await wait_for_turns()
    assert message.stop_reason == "error" and "image" in (message.error_message or "")
    assert leftovers(live_env) == []
