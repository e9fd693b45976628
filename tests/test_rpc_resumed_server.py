"""A resumed one-shot rpc turn finds its conversation's server though agy loads the conversation
for longer than the ownership check's deadline (issue 29, item 7; agy-sim's `AGY_SIM_LOAD_MS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import run_turn
from live_helpers import scenario_answer

from agy_provider.hookspecs import hookimpl
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import TurnFacts
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import get_plugin_manager

pytestmark = pytest.mark.slow


class SourcesOfText:
    """`observe_event`: the source each text delta was read from (`TurnContext.source`)."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    @hookimpl
    def observe_event(self, event: Any, turn: Any) -> None:
        if event.type == "text_delta":
            self.sources.append(turn.source)


async def test_a_resumed_one_shot_turn_streams_over_rpc_after_agy_loaded_it(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "auto")  # the default: rpc beside the database
    monkeypatch.setenv("AGY_WARM", "0")  # one-shot: `agy -p --conversation <id>`
    monkeypatch.setenv("AGY_SIM_SPEED", "1")
    # The resumed conversation loads 8 s, past the 5 s the server check is given under `auto`:
    # its server answers `trajectory not found` until then, and agy writes nothing before.
    monkeypatch.setenv("AGY_SIM_LOAD_MS", "8000")
    answer = scenario_answer("default")
    events, first = await run_turn("one", session="resumed")
    expect_done(events, first, answer)
    seen = SourcesOfText()
    get_plugin_manager().register(seen, name="test-sources-of-text")
    try:
        history = [UserMessage(content="one", timestamp=0), first]
        events, second = await run_turn("two", session="resumed", history=history)
    finally:
        get_plugin_manager().unregister(name="test-sources-of-text")
    expect_done(events, second, answer)
    assert "rpc" in seen.sources, f"the text came from {set(seen.sources)} only"


async def facts_of_one_turn(prompt: str) -> TurnFacts:
    stream = stream_simple(
        MODEL, Context(messages=[UserMessage(content=prompt, timestamp=0)]), SimpleStreamOptions()
    )
    events = [event async for event in stream]
    expect_done(events, await stream.result(), scenario_answer("default"))
    await wait_for_turns()
    return stream.facts


async def test_a_fallback_from_rpc_is_counted_in_the_turns_facts(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_EVENT_SOURCE", "auto")
    monkeypatch.setenv("AGY_WARM", "0")
    # No language server: rpc cannot start, the database serves the turn.
    facts = await facts_of_one_turn("no server")
    assert (facts.source, facts.source_fallbacks) == ("sqlite", 1)
    # With its server, nothing falls back.
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")  # long enough for rpc to take over
    stream = stream_simple(
        MODEL, Context(messages=[UserMessage(content="server", timestamp=0)]), SimpleStreamOptions()
    )
    events = [event async for event in stream]
    expect_done(events, await stream.result(), scenario_answer("slow"))
    await wait_for_turns()
    assert stream.facts.source_fallbacks == 0
