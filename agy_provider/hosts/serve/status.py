"""serve's HTTP status for a turn: a streamed response's status held until agy started the turn or
refused it, and a refusal's status, text and headers (a quota's `Retry-After` from agy's reset).

Every route that streams a turn (Chat Completions, Messages, Responses, and any route beside them)
calls `hold_status` before its first byte and answers a `Refusal` in its own shape.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import math
import time
from collections.abc import Mapping
from typing import Any
from typing import Final

from starlette.responses import JSONResponse
from starlette.types import Receive

from agy_provider.agy.quota import QuotaInfo
from agy_provider.agy.quota import quota_of
from agy_provider.hosts.serve.http import Shape
from agy_provider.hosts.serve.http import error_body
from agy_provider.hosts.serve.http import until_disconnected
from agy_provider.hosts.serve.turn import RunningTurn
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage

__all__ = [
    "HOLD_SECONDS",
    "Held",
    "Refusal",
    "failure",
    "hold_status",
    "quota_headers",
    "refusal_of",
    "refusal_response",
]

# How long a streamed response's status waits for agy to start the turn. agy refuses before it
# starts: a bad model in milliseconds, a quota after its cold start and the quota check (~2.5 s
# cold, more on a loaded machine, and a warm agy has started already), a dead agy at once or at
# its exit; a turn that started streams its first thinking a second or two after that. 15 s
# covers all of them with room, and stays far below the time clients and proxies wait for
# response headers (the SDKs 600 s, nginx's default 60 s), so holding never looks like a hang.
# After it the response is 200 and streams; an error then is an event.
HOLD_SECONDS: Final = 15.0
# What OpenAI's API calls a quota spent (its SDKs raise `RateLimitError` for the 429 either way;
# Codex stops on it instead of retrying).
_QUOTA_CODE: Final = "insufficient_quota"


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A turn that failed, as HTTP: the `status`, the `text` to send, the `headers` (a quota's
    `Retry-After` and rate-limit headers), the failed `message`, and agy's `quota` words."""

    status: int
    text: str
    message: AssistantMessage
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    quota: QuotaInfo | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Held:
    """How the hold ended: `refusal` when the turn failed before it started, `gone` when the
    client left (the turn is aborted); neither: stream (status 200)."""

    refusal: Refusal | None = None
    gone: bool = False


async def hold_status(turn: RunningTurn, receive: Receive, bound: float = HOLD_SECONDS) -> Held:
    """Wait until `turn` started (its first event after `start`), failed, or `bound` seconds
    passed, whichever first; the client leaving meanwhile aborts the turn. Nothing of the turn
    is lost: what was read ahead is the start of `turn.events()`."""
    ahead = asyncio.ensure_future(turn.read_ahead(bound))
    gone = asyncio.ensure_future(until_disconnected(receive))
    try:
        await asyncio.wait({ahead, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ahead, gone):
            task.cancel()
        await asyncio.gather(ahead, gone, return_exceptions=True)
    if ahead.done() and not ahead.cancelled():
        first = ahead.result()
        if isinstance(first, ErrorEvent):
            return Held(refusal_of(first.error))
        return Held()
    await turn.abandon("the client went away")
    return Held(gone=True)


def refusal_of(message: AssistantMessage, now: float | None = None) -> Refusal:
    """The HTTP status, text and headers for a turn that failed with `message`: 400 a turn that
    could not start, 404 a model agy does not know, 429 agy's quota (with when it resets), else
    502 (agy failed or died)."""
    text = message.error_message or "the agy turn failed"
    lowered = text.lower()
    if text.startswith("agy-provider could not start the turn"):
        return Refusal(400, text, message)
    if "is not available" in text and "agy models" in text:
        # agy does not know the model (a catalog older than agy's own list)
        return Refusal(404, text, message)
    quota = quota_of(message)
    if quota is None and "quota" not in lowered and "resource_exhausted" not in lowered:
        return Refusal(502, text, message)
    now = time.time() if now is None else now
    headers = quota_headers(quota, now)
    left = _seconds_left(quota, now)
    if left is not None and "quota resets" not in text:  # the turn's own hint says it already
        at = datetime.datetime.fromtimestamp(now + left, datetime.UTC)
        text = (
            f"{text} (agy's quota resets at {at:%Y-%m-%d %H:%M:%S} UTC, in {_duration(left)}; "
            "retry then)"
        )
    return Refusal(429, text, message, headers, quota)


def failure(message: AssistantMessage) -> tuple[int, str]:
    """`refusal_of`'s status and text: what a stream's error event says once streaming."""
    refused = refusal_of(message)
    return refused.status, refused.text


def refusal_response(shape: Shape, refusal: Refusal) -> JSONResponse:
    """The refusal in the API's shape, with its headers. Failures of agy are not worth an
    automatic retry by the clients' SDKs (they retry 5xx and 429 unless told; a quota resets in
    hours): `x-should-retry: false` says so."""
    body: Any = error_body(shape, refusal.status, refusal.text)
    if shape == "openai" and refusal.status == 429:
        body["error"]["code"] = _QUOTA_CODE
    headers = {**refusal.headers}
    if refusal.status >= 429:
        headers["x-should-retry"] = "false"
    return JSONResponse(body, refusal.status, headers=headers)


def _seconds_left(quota: QuotaInfo | None, now: float) -> int | None:
    """Whole seconds until agy's quota resets (None when agy did not say)."""
    if quota is None or quota.resets_in is None:
        return None
    left = quota.resets_at - now if quota.resets_at is not None else quota.resets_in
    return max(0, math.ceil(left)) if math.isfinite(left) else None


def quota_headers(quota: QuotaInfo | None, now: float) -> dict[str, str]:
    """What a quota refusal tells a client or router in headers, only what agy said: no request
    is served until the reset (remaining 0), and when that is. agy states no limit, so none of
    the `-limit` headers is sent."""
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "x-ratelimit-remaining-requests": "0",
    }
    left = _seconds_left(quota, now)
    if left is not None:
        at = datetime.datetime.fromtimestamp(now + left, datetime.UTC)
        headers["retry-after"] = str(left)
        headers["anthropic-ratelimit-requests-reset"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        headers["x-ratelimit-reset-requests"] = _duration(left)
    return headers


def _duration(seconds: int) -> str:
    """`120h9m43s`: agy's (Go's) way of saying a delay, which OpenAI's headers use too."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
