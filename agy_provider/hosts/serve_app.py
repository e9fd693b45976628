"""`agy-provider serve`: agy behind OpenAI- and Anthropic-compatible endpoints on loopback — the
Starlette app, its routes, and the uvicorn server it runs in (in-process, our own signals).

A host of the provider like the others: each request is converted (`serve_convert`), started
through `hosts/_turns.start_turn` (`serve_turn`) and answered in its API's shape
(`serve_openai`, `serve_anthropic`); `serve_http` guards the door.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import ipaddress
import json
import logging
import time
from collections.abc import AsyncIterator
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.routing import Route

from agy_provider.bridge.http_serving import listening_socket
from agy_provider.errors import AgyError
from agy_provider.hosts import serve_anthropic
from agy_provider.hosts import serve_openai
from agy_provider.hosts._turns import DEFAULT_MODEL_ID
from agy_provider.hosts._turns import agy_catalog
from agy_provider.hosts.serve_convert import RequestError
from agy_provider.hosts.serve_convert import ServeAsk
from agy_provider.hosts.serve_convert import anthropic_ask
from agy_provider.hosts.serve_convert import openai_ask
from agy_provider.hosts.serve_http import MAX_BODY_BYTES
from agy_provider.hosts.serve_http import Guard
from agy_provider.hosts.serve_http import Shape
from agy_provider.hosts.serve_http import SseResponse
from agy_provider.hosts.serve_http import error_body
from agy_provider.hosts.serve_http import error_response
from agy_provider.hosts.serve_http import shape_of
from agy_provider.hosts.serve_http import sse
from agy_provider.hosts.serve_http import until_disconnected
from agy_provider.hosts.serve_owners import Owner
from agy_provider.hosts.serve_owners import owner_of
from agy_provider.hosts.serve_tokens import context_window
from agy_provider.hosts.serve_tokens import estimate_context
from agy_provider.hosts.serve_tokens import overflow_response
from agy_provider.hosts.serve_turn import RunningTurn
from agy_provider.hosts.serve_turn import ServeTurns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.workers import off_loop

__all__ = ["DEFAULT_PORT", "ServeServer", "ServeSettings", "is_loopback"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 8642
# uvicorn's cap on one h11 event, so on a request's line and headers together: far above what
# any SDK sends, far below what could hurt.
MAX_HEADER_BYTES = 64 * 1024
# How long a stopping server lets running requests finish before cancelling them.
DRAIN_SECONDS = 10.0
# A body longer than this is parsed, converted and counted in a worker thread: a long transcript
# (megabytes, up to the body cap) would hold the loop, and every other client's stream, for
# tens of milliseconds.
_PARSE_OFF_LOOP = 256 * 1024
# `agy models` is asked at most this often for `/v1/models` (it spawns agy).
_CATALOG_SECONDS = 300.0


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True, slots=True)
class ServeSettings:
    """How the server runs: where it listens, its token, the agy it runs and where."""

    token: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    agy_bin: str | None = None
    cwd: str | None = None
    max_body: int = MAX_BODY_BYTES


class ServeServer:
    """The app and its uvicorn server, run in the caller's loop.

    `await run(stop)` serves until `stop` is set, then drains (running requests get
    `DRAIN_SECONDS`), aborts what still runs and returns once no agy of its turns is left.
    """

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.turns = ServeTurns(agy_bin=settings.agy_bin, cwd=settings.cwd)
        self.port = settings.port
        self._catalog: tuple[float, list[str]] | None = None
        app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            ],
            exception_handlers={HTTPException: self._http_error},
        )
        self.app = Guard(app, settings.token, max_body=settings.max_body)

    # --- the server --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, ready: Callable[[int], None] | None = None) -> None:
        sock = listening_socket(self.settings.host, self.settings.port, 128, reuse_address=True)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            log_level=None,
            access_log=False,  # a request line can carry anything; ours never logs the token
            proxy_headers=False,
            server_header=False,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
        )
        config.load()
        # uvicorn's h11 protocol writes access lines (path and query string) whenever its access
        # logger has a handler anywhere up the tree, whatever the config says: a token sent in
        # the URL must not reach a log, so that logger never passes records on.
        logging.getLogger("uvicorn.access").propagate = False
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        # The turn machinery, loaded before the first request (the provider would import it
        # in a worker on its first turn): no request pays that import.
        await off_loop(importlib.import_module, "agy_provider.live.turn_start")
        try:
            await server.startup(sockets=[sock])
            if ready is not None:
                ready(self.port)
            await stop.wait()
        finally:
            if server.started:
                await server.shutdown(sockets=[sock])
            else:
                sock.close()
            await self.turns.stop_all("agy-provider serve is stopping")

    # --- routes ------------------------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        shape = shape_of(request.scope)
        try:
            ids = await self._model_ids()
        except AgyError as exc:
            return error_response(shape, 503, f"agy's models could not be listed: {exc}")
        if shape == "anthropic":
            return JSONResponse(serve_anthropic.model_list(ids))
        return JSONResponse(serve_openai.model_list(ids))

    async def _model_ids(self) -> list[str]:
        now = time.monotonic()
        if self._catalog is None or now - self._catalog[0] > _CATALOG_SECONDS:
            catalog = await off_loop(agy_catalog, self.settings.agy_bin)
            ids = [DEFAULT_MODEL_ID]
            for model in catalog:
                ids.append(model.id)
                ids.extend(f"{model.id}-{effort}" for effort in model.efforts)
            self._catalog = (now, ids)
        return self._catalog[1]

    async def _chat(self, request: Request) -> Response:
        return await self._turn(request, "openai", openai_ask)

    async def _messages(self, request: Request) -> Response:
        return await self._turn(request, "anthropic", anthropic_ask)

    async def _count_tokens(self, request: Request) -> Response:
        """`POST /v1/messages/count_tokens`: the request's input tokens, estimated locally."""
        read = await self._read(request, "anthropic", anthropic_ask)
        if isinstance(read, Response):
            return read
        return JSONResponse({"input_tokens": read[1]})

    async def _read(
        self, request: Request, shape: Shape, convert: Callable[[Any], ServeAsk]
    ) -> Response | tuple[ServeAsk, int, Owner]:
        """The request as a turn's ask, its estimated input tokens and its owner, or the error
        response. A long body is parsed and counted in a worker (a few ms per MB)."""
        raw = await request.body()
        big = len(raw) > _PARSE_OFF_LOOP
        try:
            body = await off_loop(json.loads, raw) if big else json.loads(raw)
        except ValueError as exc:
            return error_response(shape, 400, f"the body is not JSON: {exc}")
        if not isinstance(body, dict):
            return error_response(shape, 400, "the body must be a JSON object")
        try:
            owner = owner_of(body, request.headers, self.turns.owners.responses)
            ask = await off_loop(convert, body) if big else convert(body)
            ask = dataclasses.replace(ask, session_key=owner.key)
            tokens = (
                await off_loop(estimate_context, ask.context)
                if big
                else estimate_context(ask.context)
            )
        except RequestError as exc:
            return error_response(shape, exc.status, str(exc), exc.param)
        except (TypeError, AttributeError, ValueError) as exc:  # a shape no check foresaw
            log.info("a malformed %s request: %r", shape, exc)
            return error_response(shape, 400, "the request is malformed: check its fields' types")
        return ask, tokens, owner

    async def _turn(
        self, request: Request, shape: Shape, convert: Callable[[Any], ServeAsk]
    ) -> Response:
        read = await self._read(request, shape, convert)
        if isinstance(read, Response):
            return read
        ask, tokens, owner = read
        window = context_window(ask.model)
        if tokens > window:
            return overflow_response(shape, tokens, window)
        try:
            await self.turns.check(ask)
        except RequestError as exc:
            return error_response(shape, exc.status, str(exc), exc.param)
        placement = self.turns.owners.place(ask, owner)
        turn = self.turns.start(ask, placement, owner, input_tokens=tokens)
        model = ask.model
        if ask.stream:
            return SseResponse(self._frames(turn, shape, model))
        last = await _whole(turn, request.receive)
        if last is None:  # the client went away; the turn is aborted
            return Response(status_code=499)
        if isinstance(last, ErrorEvent):
            status, text = _failure(last.error)
            return error_response(shape, status, text)
        assert isinstance(last, DoneEvent)
        if shape == "anthropic":
            return JSONResponse(serve_anthropic.message(turn, last.message, model))
        return JSONResponse(serve_openai.completion(turn, last.message, model))

    async def _frames(self, turn: RunningTurn, shape: Shape, model: str) -> AsyncIterator[bytes]:
        def failed(message: AssistantMessage) -> Any:
            status, text = _failure(message)
            return error_body(shape, status, text)

        if shape == "anthropic":
            async for name, data in serve_anthropic.message_events(turn, model, failed):
                yield sse(data, name)
        else:
            async for chunk in serve_openai.completion_chunks(turn, model, failed):
                yield sse(chunk)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        detail = "no such endpoint" if status == 404 else str(getattr(exc, "detail", exc))
        return error_response(shape_of(request.scope), status, detail)


async def _whole(turn: RunningTurn, receive: Any) -> AssistantMessageEvent | None:
    """The turn's last event, or None once the client went away (the turn then aborts)."""
    events = turn.events()

    async def last() -> AssistantMessageEvent | None:
        final = None
        async for event in events:
            final = event
        return final

    consume = asyncio.ensure_future(last())
    gone = asyncio.ensure_future(until_disconnected(receive))
    try:
        done, _ = await asyncio.wait({consume, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (consume, gone):
            if not task.done():
                task.cancel()
        await asyncio.gather(consume, gone, return_exceptions=True)
        with contextlib.suppress(RuntimeError):
            await events.aclose()
    return consume.result() if consume in done and not consume.cancelled() else None


def _failure(message: AssistantMessage) -> tuple[int, str]:
    """The HTTP status and text for a turn that failed."""
    text = message.error_message or "the agy turn failed"
    if text.startswith("agy-provider could not start the turn"):
        return 400, text
    if "quota" in text.lower() or "resource_exhausted" in text.lower():
        return 429, text
    return 502, text
