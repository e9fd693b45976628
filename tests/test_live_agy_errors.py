"""agy's own words reach the user when it refuses a turn (agy-sim imitating agy 1.2.x)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL, expect_error, leftovers

from agy_provider.options import SimpleStreamOptions
from agy_provider.provider import stream_simple, wait_for_turns
from agy_provider.types import Context, UserMessage

pytestmark = pytest.mark.slow


async def test_a_model_agy_does_not_offer_is_reported_in_agys_words(
    live_env: Path, recorder: Any
) -> None:
    model = dataclasses.replace(MODEL, id="gemini-0.1-nonexistent")
    stream = stream_simple(
        model, Context(messages=[UserMessage(content="hi", timestamp=0)]), SimpleStreamOptions()
    )
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    expect_error(events, message)
    assert "is not available" in (message.error_message or "")
    assert "agy models" in (message.error_message or "")  # what to do, as agy says it
    assert leftovers(live_env, recorder) == []


async def test_the_simulator_without_a_state_folder_uses_its_own_not_agys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agy-sim on its defaults writes to its own folder; the turn must watch that folder."""
    from live_helpers import agy_sim_path, expect_done, scenario_answer

    home = tmp_path / "home"
    for name in ("ANTIGRAVITY_APP_DATA_DIR", "AGY_APP_DATA_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    monkeypatch.setenv("AGY_SIM_SPEED", "4")
    monkeypatch.delenv("AGY_SIM_SCENARIO", raising=False)
    stream = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="hi", timestamp=0)]),
        SimpleStreamOptions(),
        agy_bin=agy_sim_path(),
        event_source="auto",
    )
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()
    expect_done(events, message, scenario_answer("default"))
    sim_state = home / ".local" / "state" / "agy-provider" / "sim-state"
    assert list((sim_state / "conversations").glob("*.db"))
    assert not (home / ".gemini").exists()
