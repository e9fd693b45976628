"""`agy-provider serve`: agy behind OpenAI- and Anthropic-compatible endpoints on loopback — the
Starlette app, its routes, and the uvicorn server it runs in (in-process, our own signals).

A host of the provider like the others: each request is converted (`serve/convert`,
`serve/responses_ask`), started through `hosts/turns.start_turn` (`serve/turn`) and answered in
its API's shape (`serve/openai`, `serve/anthropic`, `serve/responses`); `serve/http` guards the
door.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import ipaddress
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

from agy_provider.errors import AgyError
from agy_provider.errors import IncompleteStreamError
from agy_provider.hosts.serve import anthropic
from agy_provider.hosts.serve import openai
from agy_provider.hosts.serve import pi_messages
from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.body import BodyError
from agy_provider.hosts.serve.body import parse_body
from agy_provider.hosts.serve.convert import anthropic_ask
from agy_provider.hosts.serve.convert import openai_ask
from agy_provider.hosts.serve.http import MAX_BODY_BYTES
from agy_provider.hosts.serve.http import Guard
from agy_provider.hosts.serve.http import Shape
from agy_provider.hosts.serve.http import SseResponse
from agy_provider.hosts.serve.http import error_body
from agy_provider.hosts.serve.http import error_response
from agy_provider.hosts.serve.http import shape_of
from agy_provider.hosts.serve.http import sse
from agy_provider.hosts.serve.http import until_disconnected
from agy_provider.hosts.serve.log import RequestLog
from agy_provider.hosts.serve.log import RequestRecord
from agy_provider.hosts.serve.log import record_of
from agy_provider.hosts.serve.models import ModelChoice
from agy_provider.hosts.serve.models import ModelMap
from agy_provider.hosts.serve.owners import Owner
from agy_provider.hosts.serve.owners import owner_of
from agy_provider.hosts.serve.responses import RememberedResponses
from agy_provider.hosts.serve.responses import ResponseWriter
from agy_provider.hosts.serve.responses_ask import ResponsesAsk
from agy_provider.hosts.serve.responses_ask import responses_ask
from agy_provider.hosts.serve.status import HOLD_SECONDS
from agy_provider.hosts.serve.status import Refusal
from agy_provider.hosts.serve.status import failure
from agy_provider.hosts.serve.status import hold_status
from agy_provider.hosts.serve.status import refusal_of
from agy_provider.hosts.serve.status import refusal_response
from agy_provider.hosts.serve.tokens import context_window
from agy_provider.hosts.serve.tokens import estimate_context
from agy_provider.hosts.serve.tokens import overflow_response
from agy_provider.hosts.serve.turn import RunningTurn
from agy_provider.hosts.serve.turn import ServeTurns
from agy_provider.hosts.serve.turn import check_request_images
from agy_provider.hosts.serve.usage import QuotaUsage
from agy_provider.hosts.turns import DEFAULT_MODEL_ID
from agy_provider.hosts.turns import agy_catalog
from agy_provider.http_serving import listening_socket
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
    # The user's model map entries (`PATTERN=MODEL`, tried before `serve/models`' defaults).
    model_map: tuple[tuple[str, str], ...] = ()
    # The request log: 1 a line per request, 2 its headers too (secrets masked), to `log`.
    verbosity: int = 0
    log: Callable[[str], None] | None = None
    # How long a streamed response's status waits for agy to start the turn (`serve/status`).
    status_hold: float = HOLD_SECONDS


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
        self.models = ModelMap(settings.model_map)
        self.responses = RememberedResponses()
        self.usage = QuotaUsage(settings.agy_bin)
        app = Starlette(
            routes=[
                Route("/", self._root, methods=["GET"]),  # HEAD too: Starlette adds it
                Route("/health", self._health, methods=["GET"]),
                Route("/v1/usage", self._usage, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/responses/{response_id}", self._response, methods=["GET", "DELETE"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route(pi_messages.PATH, self._pi_messages, methods=["POST"]),
            ],
            exception_handlers={HTTPException: self._http_error},
        )
        self.guard = Guard(app, settings.token, max_body=settings.max_body)
        self.app = RequestLog(
            self.guard,
            verbosity=settings.verbosity,
            write=settings.log or (lambda line: log.info("%s", line)),
            secret=settings.token,
        )

    # --- the server --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, ready: Callable[[int], None] | None = None) -> None:
        sock = listening_socket(self.settings.host, self.settings.port, 128, reuse_address=True)
        self.port = sock.getsockname()[1]
        self.guard.serve_at(self.settings.host, self.port)
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

    async def _root(self, request: Request) -> Response:
        # What a client probing the base URL (Claude Code sends `HEAD /`) or a person finds.
        return JSONResponse(
            {
                "name": "agy-provider serve",
                "endpoints": [
                    "/v1/models",
                    "/v1/chat/completions",
                    "/v1/messages",
                    "/v1/responses",
                    "/v1/usage",
                    "/health",
                ],
            }
        )

    async def _health(self, request: Request) -> Response:
        # For a router's or a supervisor's probe, without the token: that the server answers,
        # nothing about agy, the turns or the machine.
        return JSONResponse({"status": "ok"})

    async def _usage(self, request: Request) -> Response:
        """`GET /v1/usage`: agy's quota windows (`serve/usage`)."""
        return await self.usage.response(request)

    async def _models(self, request: Request) -> Response:
        shape = shape_of(request.scope)
        try:
            ids = await self._model_ids()
        except AgyError as exc:
            return error_response(shape, 503, f"agy's models could not be listed: {exc}")
        ids = [*ids, *(alias for alias, _ in self.models.aliases(ids))]
        if shape == "anthropic":
            return JSONResponse(anthropic.model_list(ids))
        return JSONResponse(openai.model_list(ids))

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

    async def _pi_messages(self, request: Request) -> Response:
        """`POST /pi/messages`: pi's own wire API (`serve/pi_messages`)."""
        return await pi_messages.respond(self, request)

    async def _count_tokens(self, request: Request) -> Response:
        """`POST /v1/messages/count_tokens`: the request's input tokens, estimated locally."""
        read = await self._read(request, "anthropic", anthropic_ask)
        if isinstance(read, Response):
            return read
        return JSONResponse({"input_tokens": read[1]})

    async def _read(
        self, request: Request, shape: Shape, convert: Callable[[Any], ServeAsk]
    ) -> Response | tuple[ServeAsk, int, Owner]:
        """The request as a turn's ask (its model chosen by the map, its images checked), its
        estimated input tokens and its owner, or the error response. A long body is parsed,
        converted and counted in a worker (a few ms per MB)."""
        record = record_of(request.scope)
        raw = await request.body()
        big = len(raw) > _PARSE_OFF_LOOP
        try:
            body = await parse_body(raw)
        except BodyError as exc:
            return error_response(shape, 400, str(exc))
        try:
            owner = owner_of(body, request.headers, self.turns.owners.responses)
            ask = await off_loop(convert, body) if big else convert(body)
            ask = dataclasses.replace(ask, session_key=owner.key, key_source=owner.source)
            if record is not None:
                record.model_asked = ask.model
                record.key_source = owner.source
            choice = await self.choose_model(ask.model)
            ask = dataclasses.replace(ask, model=choice.used)
            if record is not None:
                record.model_used = choice.used
            await check_request_images(ask.context)
            tokens = (
                await off_loop(estimate_context, ask.context)
                if big
                else estimate_context(ask.context)
            )
        except RequestError as exc:
            return error_response(shape, exc.status, str(exc), exc.param)
        except (TypeError, AttributeError, ValueError, RecursionError) as exc:
            # A shape no check foresaw: a client error, never a 500 or a traceback.
            log.info("a malformed %s request: %r", shape, exc)
            return error_response(shape, 400, "the request is malformed: check its fields' types")
        return ask, tokens, owner

    async def _begin(
        self, request: Request, shape: Shape, convert: Callable[[Any], ServeAsk]
    ) -> Response | RunningTurn:
        """The request's turn, started for its owner where the ownership rule places it, or the
        error response (a malformed request, a context over the model's window, a refusal)."""
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
        return self.turns.start(ask, placement, owner, input_tokens=tokens)

    async def _last(self, turn: RunningTurn, request: Request) -> AssistantMessageEvent | None:
        """A whole (not streamed) request's last event, the request log told; None once the
        client went away (the turn is aborted)."""
        try:
            return await _whole(turn, request.receive)
        finally:
            await self.note_turn(turn, record_of(request.scope))

    async def _turn(
        self, request: Request, shape: Shape, convert: Callable[[Any], ServeAsk]
    ) -> Response:
        turn = await self._begin(request, shape, convert)
        if isinstance(turn, Response):
            return turn
        model = turn.ask.model
        if turn.ask.stream:
            refused = await self.hold(turn, request, shape)
            if refused is not None:
                return refused
            return SseResponse(self._frames(turn, shape, model, record_of(request.scope)))
        last = await self._last(turn, request)
        if last is None:  # the client went away; the turn is aborted
            return Response(status_code=499)
        if isinstance(last, ErrorEvent):
            return refusal_response(shape, refusal_of(last.error))
        assert isinstance(last, DoneEvent)
        if shape == "anthropic":
            return JSONResponse(anthropic.message(turn, last.message, model))
        return JSONResponse(openai.completion(turn, last.message, model))

    async def hold(
        self,
        turn: RunningTurn,
        request: Request,
        shape: Shape,
        refused: Callable[[AssistantMessage], object] | None = None,
        *,
        respond: Callable[[Refusal], Response] | None = None,
    ) -> Response | None:
        """A streamed request's status (`serve/status.hold_status`): None once agy started the
        turn (or the hold's bound passed) — stream it then; else the response: the refusal in
        `shape` (`refused` told first; a route with an error shape of its own gives `respond`),
        or 499 for a client that left. Every streamed route calls it before its first byte."""
        held = await hold_status(turn, request.receive, self.settings.status_hold)
        if held.gone:
            await self.note_turn(turn, record_of(request.scope))
            return Response(status_code=499)
        if held.refusal is None:
            return None
        if refused is not None:
            refused(held.refusal.message)
        await self.note_turn(turn, record_of(request.scope))
        if respond is not None:
            return respond(held.refusal)
        return refusal_response(shape, held.refusal)

    async def choose_model(self, asked: str) -> ModelChoice:
        """The agy model for the client's name (`serve/models`); agy's catalog is asked only
        for a name other than `default`, and a catalog agy cannot list lets the name through."""
        if asked.removeprefix("agy/") == DEFAULT_MODEL_ID:
            return self.models.choose(asked, None)
        try:
            catalog: list[str] | None = await self._model_ids()
        except AgyError:
            catalog = None
        return self.models.choose(asked, catalog)

    async def note_turn(self, turn: RunningTurn, record: RequestRecord | None) -> None:
        """The turn's conversation, how it came about and its tokens, for the request log."""
        if record is None:
            return
        facts = turn.stream.facts
        if facts.conversation_id:
            record.conversation = facts.conversation_id
            record.kind = turn.continuity
        if turn.stream.done:
            try:
                usage = (await turn.stream.result()).usage
            except IncompleteStreamError:  # ended without a message: no tokens to tell
                return
            record.tokens = (usage.input + usage.cache_read + usage.cache_write, usage.output)

    async def _frames(
        self,
        turn: RunningTurn,
        shape: Shape,
        model: str,
        record: RequestRecord | None,
    ) -> AsyncIterator[bytes]:
        def failed(message: AssistantMessage) -> Any:
            status, text = failure(message)
            return error_body(shape, status, text)

        try:
            if shape == "anthropic":
                async for name, data in anthropic.message_events(turn, model, failed):
                    yield sse(data, name)
            else:
                async for chunk in openai.completion_chunks(turn, model, failed):
                    yield sse(chunk)
        finally:
            await self.note_turn(turn, record)

    async def _responses(self, request: Request) -> Response:
        """`POST /v1/responses`: the same turn as the other APIs, answered by `ResponseWriter`."""
        asked: list[ResponsesAsk] = []

        def convert(body: Any) -> ServeAsk:
            previous = body.get("previous_response_id")
            continued = None
            if previous is not None:
                continued = (
                    self.responses.continued(previous) if isinstance(previous, str) else None
                )
                if continued is None:
                    raise RequestError(
                        f"previous_response_id: no response {previous!r} is remembered here "
                        "(unknown, stored with store=false, or forgotten); resend the items",
                        param="previous_response_id",
                    )
            asked.append(responses_ask(body, continued))
            return asked[-1].ask

        turn = await self._begin(request, "openai", convert)
        if isinstance(turn, Response):
            return turn
        writer = ResponseWriter(turn, dataclasses.replace(asked[-1], ask=turn.ask), self.responses)
        self.turns.owners.remember_response(writer.id, turn.owner)
        if turn.ask.stream:
            refused = await self.hold(
                turn, request, "openai", lambda message: writer.failed(message, failure)
            )
            if refused is not None:
                return refused
            return SseResponse(self._response_frames(turn, writer, record_of(request.scope)))
        last = await self._last(turn, request)
        if last is None:  # the client went away; the turn is aborted
            return Response(status_code=499)
        if isinstance(last, ErrorEvent):
            writer.failed(last.error, failure)
            return refusal_response("openai", refusal_of(last.error))
        assert isinstance(last, DoneEvent)
        return JSONResponse(writer.whole(last.message))

    async def _response_frames(
        self, turn: RunningTurn, writer: ResponseWriter, record: RequestRecord | None
    ) -> AsyncIterator[bytes]:
        try:
            # One write per pi event: its events' frames together.
            async for batch in writer.events(failure):
                yield b"".join(sse(data, name) for name, data in batch)
        finally:
            await self.note_turn(turn, record)

    async def _response(self, request: Request) -> Response:
        """`GET` / `DELETE /v1/responses/{id}`: a response this server remembers, else 404."""
        response_id = request.path_params["response_id"]
        found = self.responses.get(response_id)
        if found is None or (request.method == "DELETE" and not self.responses.delete(response_id)):
            return error_response("openai", 404, f"no response {response_id!r} is remembered here")
        if request.method == "DELETE":
            return JSONResponse({"id": response_id, "object": "response", "deleted": True})
        return JSONResponse(found)

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
