"""agy's own words reach the user when it refuses a turn (agy-sim imitating agy 1.1.17–1.3.3)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from live_helpers import AGY_VERSIONS
from live_helpers import MODEL
from live_helpers import expect_error
from live_helpers import leftovers
from live_helpers import run_turn

from agy_provider.agy.quota import quota_error
from agy_provider.agy.quota import quota_of
from agy_provider.errors import QuotaExceededError
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.sim.scenario import load_scenario
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore

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
    from live_helpers import agy_sim_path
    from live_helpers import expect_done
    from live_helpers import scenario_answer

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


@pytest.mark.parametrize("version", AGY_VERSIONS)
async def test_a_quota_refusal_says_when_it_resets_and_is_typed(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, recorder: Any, version: str
) -> None:
    """1.1.17/1.2.13: `result` ERROR, exit 1; 1.3.3: exit 3 and an `AGY_ERROR:` line on stderr."""
    monkeypatch.setenv("AGY_SIM_VERSION", version)
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-exhausted")
    events, message = await run_turn("hi")
    expect_error(events, message)
    error = message.error_message or ""
    assert load_scenario("quota-exhausted").quota_exhausted in error  # agy's own words
    assert "(the quota resets at " in error and ", in 120h09m)" in error
    if version == "1.3.3":
        assert error.startswith("agy failed: RESOURCE_EXHAUSTED (code 429): Individual quota")
    else:
        assert error.startswith("agy ended the turn with ERROR: Individual quota reached.")
    info = quota_of(message)
    assert info is not None and info.resets_in == 120 * 3600 + 9 * 60 + 43
    typed = quota_error(message)
    assert isinstance(typed, QuotaExceededError) and typed.resets_at == info.resets_at
    assert leftovers(live_env, recorder) == []


@pytest.mark.parametrize("version", ["1.2.13", "1.3.3"])
async def test_a_vanished_conversation_is_never_silently_continued(
    live_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str
) -> None:
    """agy 1.2+ starts a new conversation for an unknown `--conversation` id, saying only a
    warning (AGY-FORMATS §2.3): a session whose database is gone starts a new one, knowingly."""
    monkeypatch.setenv("AGY_SIM_VERSION", version)
    store = SessionStore(tmp_path / "store.json")
    gone = "0f0f0f0f-0000-4000-8000-000000000000"
    store.put("s", SessionRecord(conversation_id=gone, last_step_index=3))
    _events, message = await run_turn("hi", session="s", store=store)
    record = store.get("s")
    # The provider checks the database before resuming: a new conversation, said in the log.
    assert message.stop_reason == "stop", message.error_message
    assert record is not None and record.conversation_id not in ("", gone)
    assert leftovers(live_env) == []
