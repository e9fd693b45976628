"""serve's status for a streamed turn: held until agy started the turn, so a refusal before the
first byte is an HTTP status (429 quota with `Retry-After`, 404 a model agy refuses, 502 a dead
agy) in every API, seen by the real `openai` and `anthropic` SDKs; after the hold, errors are
events. Real servers on 127.0.0.1 running agy-sim; every test ends with no agy process left.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_helpers import agy_processes
from live_helpers import leftovers
from live_helpers import scenario_answer
from serve_helpers import Served
from serve_helpers import served_fixture  # noqa: F401 (the `served` fixture)
from serve_helpers import start_server
from serve_helpers import until_no_agy

from agy_provider.agy.quota import parse_go_duration

pytestmark = pytest.mark.slow

openai = pytest.importorskip("openai", reason="the serve extra is not installed")
anthropic = pytest.importorskip("anthropic", reason="the serve extra is not installed")

HI = [{"role": "user", "content": "Hi"}]
# agy-sim's quota-exhausted scenario: "… Resets in 120h9m43s."
QUOTA_RESET = parse_go_duration("120h9m43s")


def check_quota_headers(headers: Any, reset: float) -> None:
    """`Retry-After` is the whole seconds until agy's reset (counted from agy's words, so at
    most `reset` and not before the request began), and the rate-limit headers agree."""
    retry = int(headers["retry-after"])
    assert 0 < retry <= reset
    assert reset - retry < 600  # the request took moments, not the minutes this would mean
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert parse_go_duration(headers["x-ratelimit-reset-requests"]) == retry
    at = datetime.datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"])
    assert abs(at.timestamp() - (time.time() + retry)) < 600
    assert "anthropic-ratelimit-requests-limit" not in headers  # agy states no limit
    assert headers["x-should-retry"] == "false"


async def test_a_streamed_quota_refusal_is_a_429_before_the_stream_in_every_api(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-exhausted")
    client = served.openai()
    # The SDK raises at `create`, before any chunk: a router sees the status and moves on.
    with pytest.raises(openai.RateLimitError) as chat:
        await client.chat.completions.create(model="default", messages=HI, stream=True)
    check_quota_headers(chat.value.response.headers, QUOTA_RESET)
    assert "Resets in 120h9m43s" in chat.value.message
    assert "the quota resets at" in chat.value.message  # the reset time, said as a date too
    assert chat.value.code == "insufficient_quota"

    with pytest.raises(openai.RateLimitError) as responses:
        await client.responses.create(model="default", input="Hi", stream=True)
    check_quota_headers(responses.value.response.headers, QUOTA_RESET)
    assert responses.value.code == "insufficient_quota"

    with pytest.raises(anthropic.RateLimitError) as messages:
        async with served.anthropic().messages.stream(
            model="default", max_tokens=100, messages=HI
        ) as stream:
            async for _ in stream:
                pass
    check_quota_headers(messages.value.response.headers, QUOTA_RESET)
    assert "Resets in 120h9m43s" in messages.value.message

    # Whole requests answer the same status and headers.
    with pytest.raises(openai.RateLimitError) as whole:
        await client.chat.completions.create(model="default", messages=HI)
    check_quota_headers(whole.value.response.headers, QUOTA_RESET)
    with pytest.raises(anthropic.RateLimitError) as whole_messages:
        await served.anthropic().messages.create(model="default", max_tokens=100, messages=HI)
    check_quota_headers(whole_messages.value.response.headers, QUOTA_RESET)


async def test_a_quota_error_step_from_the_model_call_is_a_429_too(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # agy started the turn, its model call failed with 429 before any content.
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-error")
    with pytest.raises(anthropic.RateLimitError) as caught:
        await served.anthropic().messages.create(
            model="default", max_tokens=100, messages=HI, stream=True
        )
    check_quota_headers(caught.value.response.headers, parse_go_duration("2h13m5s"))
    assert "reset after 2h13m5s" in caught.value.message


async def test_a_model_agy_refuses_is_a_404_before_the_stream(served: Served) -> None:
    # A catalog older than agy's own list names a model agy refuses ("is not available").
    catalog = await served.server._model_ids()
    served.server._catalog = (time.monotonic(), [*catalog, "gemini-0-retired"])
    with pytest.raises(openai.NotFoundError, match="not available"):
        await served.openai().chat.completions.create(
            model="gemini-0-retired", messages=HI, stream=True
        )
    with pytest.raises(anthropic.NotFoundError, match="not available"):
        await served.anthropic().messages.create(
            model="gemini-0-retired", max_tokens=100, messages=HI, stream=True
        )
    with pytest.raises(openai.NotFoundError, match="not available"):
        await served.openai().responses.create(model="gemini-0-retired", input="Hi", stream=True)


async def test_a_dead_agy_is_a_502_before_the_stream(live_env: Path, tmp_path: Path) -> None:
    dead = tmp_path / "dead-agy"
    dead.write_text("#!/bin/sh\necho 'panic: runtime error: invalid memory address' >&2\nexit 2\n")
    dead.chmod(0o755)
    served, stop, task = await start_server(live_env, agy_bin=str(dead))
    try:
        with pytest.raises(openai.InternalServerError) as chat:
            await served.openai().chat.completions.create(model="default", messages=HI, stream=True)
        assert chat.value.status_code == 502 and "panic" in chat.value.message
        with pytest.raises(anthropic.InternalServerError) as messages:
            await served.anthropic().messages.create(
                model="default", max_tokens=100, messages=HI, stream=True
            )
        assert messages.value.status_code == 502
        with pytest.raises(openai.InternalServerError) as responses:
            await served.openai().responses.create(model="default", input="Hi", stream=True)
        assert responses.value.status_code == 502
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


async def test_a_started_turn_streams_whole_through_the_hold(served: Served) -> None:
    # What the hold read ahead (start, the first content) is the stream's beginning.
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream(
            "POST",
            f"{served.base}/v1/chat/completions",
            headers=served.headers(),
            json={"model": "default", "messages": HI, "stream": True},
        ) as response,
    ):
        assert response.status_code == 200
        body = (await response.aread()).decode()
    frames = [line for line in body.splitlines() if line.startswith("data: ")]
    assert frames[-1] == "data: [DONE]"
    anthropic_text = ""
    async with served.anthropic().messages.stream(
        model="default", max_tokens=100, messages=HI
    ) as stream:
        async for text in stream.text_stream:
            anthropic_text += text
    assert anthropic_text == scenario_answer("default")


async def test_after_the_hold_a_refusal_is_an_error_event(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_SIM_SCENARIO", "quota-exhausted")
    # A hold of 0 s: the status goes before agy could answer anything, as after a long hold.
    served, stop, task = await start_server(live_env, status_hold=0.0)
    try:
        stream = await served.openai().chat.completions.create(
            model="default", messages=HI, stream=True
        )
        with pytest.raises(openai.APIError, match="Resets in 120h9m43s"):
            async for _ in stream:
                pass
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                f"{served.base}/v1/messages",
                headers=served.headers(),
                json={"model": "default", "max_tokens": 10, "messages": HI, "stream": True},
            )
        assert response.status_code == 200
        assert "event: error" in response.text and "rate_limit_error" in response.text
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


async def test_a_client_leaving_during_the_hold_aborts_its_turn(
    live_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # agy is slow to start (a long cold start): the status is still held when the client goes.
    monkeypatch.setenv("AGY_SIM_COLD_START_MS", "120000")
    served, stop, task = await start_server(live_env, status_hold=300.0)
    try:

        async def ask() -> None:
            async with httpx.AsyncClient(timeout=None) as http:
                await http.post(
                    f"{served.base}/v1/chat/completions",
                    headers=served.headers(),
                    json={"model": "default", "messages": HI, "stream": True},
                )

        asking = asyncio.ensure_future(ask())
        for _ in range(1000):  # a hang bound only: until the turn's agy runs
            if await asyncio.to_thread(agy_processes, live_env):
                break
            await asyncio.sleep(0.02)
        assert not asking.done()
        asking.cancel()
        await asyncio.gather(asking, return_exceptions=True)
        await until_no_agy(live_env)
        assert await _turns_end(served)
    finally:
        stop.set()
        await task
    assert not leftovers(live_env)


async def _turns_end(served: Served) -> bool:
    for _ in range(1000):
        if served.server.turns.running == 0:
            return True
        await asyncio.sleep(0.02)
    return False
