"""A resumed rpc turn parses only its new steps on the caller's loop (the first frame replays all)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL, expect_done, scenario_answer, seed_resumable

from agy_provider.options import SimpleStreamOptions
from agy_provider.provider import stream_simple, wait_for_turns
from agy_provider.types import Context, UserMessage
from agy_provider.wire import connect

pytestmark = pytest.mark.slow


async def parsed_on_loop(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier_turns: int
) -> int:
    """Bytes of stream frames parsed on the event loop's thread in one resumed rpc turn."""
    _, store, _ = seed_resumable(app, tmp_path / f"sessions-{earlier_turns}.json", earlier_turns)
    loop_thread = threading.get_ident()
    parsed = 0
    real = connect._loads

    def counting(data: bytes, what: str, offset: int | None) -> Any:
        nonlocal parsed
        if threading.get_ident() == loop_thread:
            parsed += len(data)
        return real(data, what, offset)

    monkeypatch.setattr(connect, "_loads", counting)
    stream = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="one more", timestamp=0)]),
        SimpleStreamOptions(session_id="resume"),
        store=store,
        continue_session=True,
        event_source="rpc",
    )
    events = [event async for event in stream]
    expect_done(events, await stream.result(), scenario_answer("default"))
    await wait_for_turns()
    return parsed


async def test_a_resumed_rpc_turn_parses_only_its_new_steps_on_the_loop(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "rpc")
    monkeypatch.setenv("AGY_SIM_SPEED", "1")  # so the large turn still runs when rpc is up
    small = await parsed_on_loop(live_env, tmp_path, monkeypatch, earlier_turns=3)
    large = await parsed_on_loop(live_env, tmp_path, monkeypatch, earlier_turns=1500)
    assert small > 0  # the turn did stream through rpc
    # Measured: 20,224 vs 4,214,651 bytes (6,000 earlier rows) - the first frame of every
    # (re)connect replays every earlier step, and all of it is parsed on the caller's loop.
    assert large <= 1.5 * small, (small, large)
