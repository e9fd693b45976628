"""A resumed rpc turn parses only its new steps (the stream's first frame replays all the others)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from live_helpers import MODEL
from live_helpers import expect_done
from live_helpers import scenario_answer
from live_helpers import seed_resumable

from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.wire.growing_json import GrowingJson

pytestmark = pytest.mark.slow


async def parsed(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier_turns: int
) -> tuple[int, int, int]:
    """Bytes of stream frames parsed in one resumed rpc turn (on the loop's thread, anywhere),
    and how many streams' first frames (the replays) were parsed."""
    _, store, _ = seed_resumable(app, tmp_path / f"sessions-{earlier_turns}.json", earlier_turns)
    loop_thread = threading.get_ident()
    on_loop = anywhere = replays = 0
    real = GrowingJson.loads

    def counting(self: GrowingJson, data: bytes, what: str, offset: int | None) -> Any:
        nonlocal on_loop, anywhere, replays
        anywhere += len(data)
        replays += what == "frame 1"
        if threading.get_ident() == loop_thread:
            on_loop += len(data)
        return real(self, data, what, offset)

    # Every stream frame's JSON goes through its decoder's GrowingJson.
    monkeypatch.setattr(GrowingJson, "loads", counting)
    stream = stream_simple(
        MODEL,
        Context(messages=[UserMessage(content="one more", timestamp=0)]),
        SimpleStreamOptions(session_id="resume"),
        store=store,
        continue_session=True,
        event_source="rpc",
    )
    events = [event async for event in stream]
    expect_done(events, await stream.result(), scenario_answer("slow"))
    await wait_for_turns()
    return on_loop, anywhere, replays


@pytest.mark.parametrize("paged", ["1", "0"], ids=["paged-replay", "whole-replay-skipped"])
async def test_a_resumed_rpc_turn_parses_only_its_new_steps(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paged: str
) -> None:
    """Paged: agy is asked to replay only the new steps. Not paged (an agy that ignores the
    page): the whole replay arrives and is left unparsed."""
    monkeypatch.setenv("AGY_PAGED_REPLAY", paged)
    monkeypatch.delenv("AGY_SIM_NO_SERVER")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "rpc")
    # A turn slow enough that it still runs when rpc is up, however long a 1,500-turn
    # conversation takes agy-sim's server to load: else the whole turn arrives in the skipped
    # first frame and no frame is left to parse (a flake, even on an idle machine).
    monkeypatch.setenv("AGY_SIM_SCENARIO", "slow")
    monkeypatch.setenv("AGY_SIM_SPEED", "2")
    small_loop, small, _ = await parsed(live_env, tmp_path, monkeypatch, earlier_turns=3)
    large_loop, large, replays = await parsed(live_env, tmp_path, monkeypatch, earlier_turns=1500)
    # Paged, the short replay is parsed; whole, the 4 MB replay never is.
    assert (replays > 0) == (paged == "1"), replays
    # Both turns streamed through rpc (the database alone parses no frame).
    assert small > 0 and large > 0
    # Measured before: 20,224 vs 4,214,651 bytes parsed on the caller's loop (6,000 earlier
    # rows), then the same 4 MB in a worker thread: the first frame of every (re)connect
    # replays every earlier step. Now that replay is not parsed at all.
    assert large_loop <= 1.5 * small_loop, (small_loop, large_loop)
    assert large <= 1.5 * small, (small, large)
