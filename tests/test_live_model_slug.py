"""A live turn reports the model that answered, as agy recorded it (gen_metadata 1.19)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import run_turn
from live_helpers import scenario_answer

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("source", ["sqlite", "rpc"])
async def test_the_answering_models_slug_replaces_the_asked_base(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setenv("AGY_EVENT_SOURCE", source)
    if source == "rpc":
        monkeypatch.delenv("AGY_SIM_NO_SERVER")
    assert MODEL.id == "gemini-3.7-flash"  # a tier family's base: agy picks its medium tier
    events, message = await run_turn("hello")
    expect_done(events, message, scenario_answer("default"))
    assert message.model == "gemini-3.7-flash-medium"
    assert events[-1].message.model == "gemini-3.7-flash-medium"  # type: ignore[union-attr]


async def test_a_resumed_turn_reports_its_own_model_not_an_earlier_turns(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "two-turn")
    _, first = await run_turn("one", session="s")
    assert first.model == "gemini-3.7-flash-medium"
    other = dataclasses.replace(MODEL, id="gemini-3.8-flash-high")
    stream = stream_simple(
        other,
        Context(messages=[UserMessage(content="two", timestamp=0)]),
        SimpleStreamOptions(session_id="s"),
        continue_session=True,
    )
    events = [event async for event in stream]
    second = await stream.result()
    await wait_for_turns()
    expect_done(events, second, scenario_answer("two-turn", turn=1))
    assert second.model == "gemini-3.8-flash-high"
