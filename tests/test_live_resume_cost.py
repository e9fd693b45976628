"""A resumed turn costs its new work only: the same rows decoded whatever the conversation's length.

Counts are the measure (rows decoded, rows the light scans returned); the wall clock never is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agy_provider.plugins import sqlite_source
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import scenario_answer
from live_helpers import seed_resumable

from agy_provider.agy import rows
from agy_provider.live import discovery
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage

pytestmark = pytest.mark.slow


async def resumed_turn_cost(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier_turns: int
) -> int:
    """Resume a conversation of `earlier_turns` turns; return how many rows were decoded."""
    conversation, store, last = seed_resumable(
        app, tmp_path / f"sessions-{earlier_turns}.json", earlier_turns
    )
    decoded = 0
    real = rows.decode_step_row

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal decoded
        decoded += 1
        return real(*args, **kwargs)

    # Every module that decodes rows on the live path.
    monkeypatch.setattr(sqlite_source, "decode_step_row", counting)
    monkeypatch.setattr(discovery, "decode_step_row", counting)
    stream = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="one more", timestamp=0)]),
        SimpleStreamOptions(session_id="resume"),
        store=store,
        continue_session=True,
    )
    events = [event async for event in stream]
    expect_done(events, await stream.result(), scenario_answer("default"))
    await wait_for_turns()
    record = store.get("resume")
    assert record is not None and record.conversation_id == conversation
    assert record.last_step_index > last  # the new turn was read and remembered
    return decoded


async def test_a_resumed_turn_decodes_only_its_new_rows(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = await resumed_turn_cost(live_env, tmp_path, monkeypatch, earlier_turns=3)
    large = await resumed_turn_cost(live_env, tmp_path, monkeypatch, earlier_turns=1500)
    # The new turn's rows are decoded a few times each as they grow; none of the 6,000 earlier.
    assert 0 < small < 100
    assert large <= small + 5, (small, large)
