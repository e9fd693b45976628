"""The rpc event source alone, no server: frames and snapshots of another shape are skipped or
fail as a source, closing keeps its caller's cancellation, an ownership answer of another shape is
a refusal."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from agy_provider.plugins.rpc_source import RpcEventSource
from fakes import HANG

from agy_provider.contract.turn import Binding
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import RpcError
from agy_provider.errors import TurnError
from agy_provider.rpc.client import ConnectClient
from agy_provider.rpc.language_server import prove_ownership
from agy_provider.store.config import Config


def _rpc_source() -> RpcEventSource:
    turn = TurnContext(
        session_id="",
        prompt="hi",
        cwd=".",
        config=Config(),
        event_source="rpc",
        permissions="default",
        binding=Binding(path=Path("unused.db"), conversation_id=str(uuid.uuid4())),
    )
    return RpcEventSource(turn)


def test_an_update_frame_of_another_shape_is_skipped() -> None:
    source = _rpc_source()
    for frame in (
        {"update": ["not", "an", "object"]},
        {"update": {"mainTrajectoryUpdate": "text"}},
        {"update": {"mainTrajectoryUpdate": {"stepsUpdate": 7}}},
        {"update": {"mainTrajectoryUpdate": {"stepsUpdate": {"steps": 7, "indices": 3}}}},
    ):
        source._take_update(frame)  # raised AttributeError/TypeError, killing the stream task
    assert source._latest == {}


async def test_a_snapshot_whose_steps_are_no_list_is_a_source_failure() -> None:
    # A TypeError here escaped `open()` (the turn failed "unexpectedly" instead of reading the
    # database) and killed the stream task silently.
    source = _rpc_source()
    source.client = ConnectClient(
        "http://127.0.0.1:1",
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"steps": 5})),
    )
    try:
        with pytest.raises(RpcError):
            await source._reconcile()
    finally:
        await source.aclose()


async def test_closing_the_rpc_source_does_not_swallow_the_callers_cancellation() -> None:
    source = _rpc_source()
    release = asyncio.Event()

    async def slow_to_stop() -> None:  # a stream whose connection takes a moment to close
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()
            raise

    source._spawn(slow_to_stop())
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(source.aclose())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    closing.cancel()  # the host's abort, while the source is closing
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait({closing}, timeout=HANG)
    assert closing.cancelled()  # before: aclose returned normally, the abort was lost


async def test_an_ownership_answer_of_another_shape_is_a_refusal_not_a_crash() -> None:
    conversation = str(uuid.uuid4())
    client = ConnectClient(
        "http://127.0.0.1:1",
        transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json={"metadata": [conversation]})
        ),
    )
    try:
        # Before: AttributeError escaped `open()`, failing the turn instead of handing over.
        with pytest.raises(TurnError):
            await prove_ownership(client, conversation)
    finally:
        await client.aclose()
