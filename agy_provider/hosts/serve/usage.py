"""serve's `GET /v1/usage`: agy's quota windows (`agy -p /usage`, what `agy-provider usage` shows)
as JSON or a short table, read in a worker thread, one read at a time, and kept briefly.

A quota already spent is the 429 a turn would get, with agy's reset in `Retry-After`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import PlainTextResponse
from starlette.responses import Response

from agy_provider.agy.quota import QuotaInfo
from agy_provider.agy.usage_command import QuotaReport
from agy_provider.agy.usage_command import read_quota_usage
from agy_provider.errors import AgyError
from agy_provider.errors import QuotaExceededError
from agy_provider.hosts.serve.http import error_body
from agy_provider.hosts.serve.http import shape_of
from agy_provider.hosts.serve.status import quota_headers
from agy_provider.live.runner import find_agy
from agy_provider.store.config import load_config
from agy_provider.workers import off_loop

__all__ = ["USAGE_SECONDS", "QuotaUsage"]

# A report is answered again for this long: each read starts an agy (a cold start of seconds),
# and a dashboard or router polling every few seconds must not keep one running. The windows
# move over hours; `observedAt` says how old the answer is.
USAGE_SECONDS: Final = 30.0


class QuotaUsage:
    """agy's quota for `GET /v1/usage`: one `agy -p /usage` at a time (every request meanwhile
    waits for the same), its answer — or agy's quota refusal — kept `USAGE_SECONDS`
    (a failure to read is not kept)."""

    def __init__(self, agy_bin: str | None) -> None:
        self.agy_bin = agy_bin
        self._kept: tuple[float, QuotaReport | AgyError] | None = None
        self._reading: asyncio.Future[QuotaReport | AgyError] | None = None

    async def read(self) -> QuotaReport | AgyError:
        """The newest report (or the error agy's `/usage` ended in), read now if none is kept."""
        kept = self._kept
        if kept is not None and time.monotonic() - kept[0] < USAGE_SECONDS:
            return kept[1]
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read())
        # Shielded: a client leaving does not cancel the read others wait for.
        return await asyncio.shield(self._reading)

    async def _read(self) -> QuotaReport | AgyError:
        try:
            answer: QuotaReport | AgyError = await off_loop(self._read_blocking)
        except AgyError as exc:
            answer = exc
        if isinstance(answer, QuotaReport | QuotaExceededError):  # a failure is asked again
            self._kept = (time.monotonic(), answer)
        return answer

    def _read_blocking(self) -> QuotaReport:
        # In a worker: finding agy reads the config and PATH, and `/usage` runs agy (seconds).
        return read_quota_usage(find_agy(self.agy_bin or load_config().agy_bin))

    async def response(self, request: Request) -> Response:
        """The report as JSON (`agy-provider usage --json`'s object), or as the table `agy-provider
        usage` prints for `?format=text` or `Accept: text/plain`."""
        text = _wants_text(request)
        answer = await self.read()
        if isinstance(answer, QuotaReport):
            if text:
                return PlainTextResponse(answer.table())
            return JSONResponse(answer.to_json())
        if isinstance(answer, QuotaExceededError):
            info = QuotaInfo(answer.message, answer.resets_in, answer.resets_at, code=answer.code)
            headers = quota_headers(info, time.time())
            said = f"agy's quota is used up: {answer.message}"
            if text:
                return PlainTextResponse(said + "\n", 429, headers=headers)
            return JSONResponse(
                error_body(shape_of(request.scope), 429, said), 429, headers=headers
            )
        said = f"agy's quota could not be read: {answer}"
        if text:
            return PlainTextResponse(said + "\n", 503)
        return JSONResponse(error_body(shape_of(request.scope), 503, said), 503)


def _wants_text(request: Request) -> bool:
    asked = request.query_params.get("format")
    if asked is not None:
        return asked.lower() in ("text", "txt", "plain")
    accept = request.headers.get("accept", "").lower()
    return "text/plain" in accept and "application/json" not in accept
