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
