"""serve's turns: one request's `ServeAsk` started through `hosts/turns.start_turn`, its pi
events relayed (structured output held back and validated), its answer remembered for the next.

Owns the turns a server runs (`ServeTurns`: abort them all, wait until agy is gone) and the
structured-output rule: the answer must parse as JSON and validate against the schema, or the
turn ends in an error instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import secrets
from collections import deque
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.argv import JSON_SCHEMA_OPTION
from agy_provider.errors import AgyError
from agy_provider.errors import UsageError
from agy_provider.hosts.serve.ask import RequestError
from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.memory import DeliveredMessages
from agy_provider.hosts.serve.owners import SESSION_PREFIX
from agy_provider.hosts.serve.owners import Owner
from agy_provider.hosts.serve.owners import Owners
from agy_provider.hosts.serve.owners import Placement
from agy_provider.hosts.turns import refusal
from agy_provider.hosts.turns import start_turn
from agy_provider.live.images import check_images
from agy_provider.live.parking import NO_RESUME_OPTION
from agy_provider.live.provider import wait_for_turns
from agy_provider.live.runner import agy_version
from agy_provider.live.runner import find_agy
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.host_input import HostTurn
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.store.config import load_config
from agy_provider.workers import off_loop

__all__ = ["ServeTurns", "StructuredOutputError", "check_request_images", "parse_structured"]

log = logging.getLogger(__name__)

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_FENCED = re.compile(r"```(?:json)?\s*\n(.*)\n```", re.DOTALL)
# How long stopping the server waits for its turns (agy's trees end in ~0.2 s after an abort;
# this only bounds a hang on a busy machine).
_STOP_BOUND = 30.0


class StructuredOutputError(Exception):
    """The answer is not JSON of the schema asked for."""


def parse_structured(text: str, schema: Mapping[str, Any]) -> Any:
    """The answer as JSON, validated against `schema` (a fenced ```json block is unwrapped).

    Raises `StructuredOutputError` saying what is wrong.
    """
    import jsonschema  # type: ignore[import-untyped]

    body = text.strip()
    fenced = _FENCED.fullmatch(body)
    if fenced:
        body = fenced[1].strip()
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise StructuredOutputError(f"agy's answer is not JSON ({exc})") from exc
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the answer"
        raise StructuredOutputError(
            f"agy's answer does not match the JSON schema at {where}: {error.message}"
        )
    return value


def _structured(texts: list[str], schema: Mapping[str, Any]) -> tuple[Any, str]:
    """The answer's JSON and the text it came from: all the answer's text, else its last text
    block alone (agy may have said something before a tool run and answered after it)."""
    whole = "".join(texts)
    try:
        return parse_structured(whole, schema), whole
    except StructuredOutputError:
        if len(texts) < 2:
            raise
        return parse_structured(texts[-1], schema), texts[-1]


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raises `RequestError` for a schema that is not a valid JSON Schema."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise RequestError(f"the JSON schema is not valid: {exc.message}") from exc


@dataclasses.dataclass(eq=False)
class RunningTurn:
    """One request's turn: its stream, the abort it obeys, and what it answers.

    `owner` is whose it is (`owner.source`: which signal gave the key, for the request log),
    `placement` where it went; `continuity` says "new", "continued" or "resumed";
    `input_tokens` is the request's estimate (`serve/tokens`).
    """

    ask: ServeAsk
    stream: AssistantMessageEventStream
    stop: AbortSignal
    turns: ServeTurns
    owner: Owner = dataclasses.field(default_factory=Owner)
    placement: Placement | None = None
    input_tokens: int = 0
    structured: Any = None  # the validated value, for structured output
    structured_text: str = ""  # the text it was read from (what the client gets)
    forced_call: ToolCall | None = None  # the tool-forcing pattern's answer
    # The status hold (`serve/status`) reads ahead: the stream's iterator, the events read
    # before `events()` ran, and a read still waiting when the hold's bound passed.
    _raw: AsyncIterator[AssistantMessageEvent] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _ahead: deque[AssistantMessageEvent] = dataclasses.field(
        default_factory=deque, init=False, repr=False
    )
    _reading: asyncio.Future[AssistantMessageEvent | None] | None = dataclasses.field(
        default=None, init=False, repr=False
    )

    @property
    def key_source(self) -> str:
        """The signal that gave the owner's key (`transcript` when none did)."""
        return self.owner.source

    @property
    def continuity(self) -> str:
        """How the turn's conversation was chosen: `resumed` (a parked turn goes on),
        `continued` (an earlier conversation), or `new`; from the conversation it ran on once
        the turn is bound."""
        placement = self.placement
        if placement is None:
            return "new"
        if placement.resuming:
            return "resumed"
        ran_on = self.stream.facts.conversation_id
        if placement.expected and (not ran_on or ran_on == placement.expected):
            return "continued"
        return "new"

    def sign(self, thinking: str) -> str:
        """The signature of a thinking block this turn hands out (`serve/owners`)."""
        return self.turns.owners.sign(self.owner, thinking)

    def abort(self, reason: str) -> None:
        if not self.stream.done:
            self.stop.abort(reason)

    async def read_ahead(self, bound: float) -> AssistantMessageEvent | None:
        """The turn's first event after `start` — its first content, or its end — waited for at
        most `bound` seconds; None when the bound passed first. What was read stays for
        `events()`, and a read still waiting when the bound passed goes on there."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while True:
            if self._reading is None:
                # A task of its own: the bound passing must not cancel the stream's iterator.
                self._reading = asyncio.ensure_future(self._next_raw())
            done, _ = await asyncio.wait({self._reading}, timeout=max(0.0, deadline - loop.time()))
            if not done:
                return None
            reading, self._reading = self._reading, None
            event = reading.result()
            if event is None:
                return None
            self._ahead.append(event)
            if not isinstance(event, StartEvent):
                return event

    async def abandon(self, reason: str) -> None:
        """The turn aborted before `events()` ran (its client went away during the hold)."""
        self.abort(reason)
        if self._reading is not None:
            self._reading.cancel()
            await asyncio.gather(self._reading, return_exceptions=True)
            self._reading = None

    async def _next_raw(self) -> AssistantMessageEvent | None:
        if self._raw is None:
            self._raw = aiter(self.stream)
        return await anext(self._raw, None)

    async def _next(self) -> AssistantMessageEvent | None:
        if self._ahead:
            return self._ahead.popleft()
        if self._reading is not None:
            reading, self._reading = self._reading, None
            return await reading
        return await self._next_raw()

    async def events(self) -> AsyncGenerator[AssistantMessageEvent, None]:
        """The turn's pi events (those `read_ahead` read first); with a schema, text is held
        until the answer validated.

        Closing the iterator before the end aborts the turn (a client that went away).
        """
        try:
            while (event := await self._next()) is not None:
                if self.ask.json_schema is not None and isinstance(
                    event, TextStartEvent | TextDeltaEvent | TextEndEvent
                ):
                    continue
                if isinstance(event, DoneEvent):
                    for final in await self._finish(event):
                        yield final
                    return
                yield event
        finally:
            self.abort("the client went away")

    async def _finish(self, done: DoneEvent) -> list[AssistantMessageEvent]:
        message = done.message
        self.turns.delivered.remember(self.ask.context.messages, message, self.owner.key)
        if self.placement is not None:
            self.turns.owners.settled(self.owner, self.placement, message)
        schema = self.ask.json_schema
        if schema is None:
            return [done]
        texts = [b.text for b in message.content if isinstance(b, TextContent)]
        try:
            # Parsing and validating a long answer takes milliseconds: off the loop.
            self.structured, text = await off_loop(_structured, texts, schema)
            self.structured_text = text
        except StructuredOutputError as exc:
            failed = dataclasses.replace(message, stop_reason="error", error_message=str(exc))
            return [ErrorEvent(reason="error", error=failed)]
        if self.ask.forced_tool or self.ask.forced_any:
            call = _forced_call(self.ask, self.structured)
            if call is None:
                failed = dataclasses.replace(
                    message,
                    stop_reason="error",
                    error_message="agy's answer is not a JSON object, which a tool's input must be",
                )
                return [ErrorEvent(reason="error", error=failed)]
            self.forced_call = call
            return [done]
        index = len(message.content)
        return [
            TextStartEvent(content_index=index, partial=message),
            TextDeltaEvent(content_index=index, delta=text, partial=message),
            TextEndEvent(content_index=index, content=text, partial=message),
            done,
        ]


def _forced_call(ask: ServeAsk, value: Any) -> ToolCall | None:
    """The forced tool call an answer makes (None: it is not a tool's input). With several tools
    the answer is `{"name", "arguments"}` (`serve/convert.forced_tools`), already validated."""
    name: object = ask.forced_tool
    if ask.forced_any and isinstance(value, dict):
        name, value = value.get("name"), value.get("arguments")
    if not isinstance(value, dict) or not isinstance(name, str):
        return None
    return ToolCall(id=f"call_{secrets.token_hex(12)}", name=name, arguments=value)


class ServeTurns:
    """The turns one server runs, each started like any host's (`start_turn`)."""

    def __init__(self, *, agy_bin: str | None, cwd: str | None) -> None:
        self.agy_bin = agy_bin
        self.cwd = cwd
        self.delivered = DeliveredMessages()
        self.owners = Owners(self.delivered)
        self._running: set[RunningTurn] = set()
        self._versions: dict[str, tuple[int, ...]] = {}

    async def check(self, ask: ServeAsk) -> None:
        """What must hold before a response starts: a valid schema, and an agy that has
        `--json-schema` (1.2+). Raises `RequestError`."""
        if ask.json_schema is None:
            return
        check_schema(ask.json_schema)
        configured = self.agy_bin or (await off_loop(load_config)).agy_bin
        try:
            binary = await off_loop(find_agy, configured)
        except AgyError as exc:
            raise RequestError(str(exc), status=503) from exc
        version = await agy_version(binary)
        found = _VERSION.search(version)
        if found and tuple(int(p) for p in found.groups()) < (1, 2, 0):
            raise RequestError(
                f"structured output needs agy 1.2 or newer (--json-schema); this agy is "
                f"{found[0]}: update agy",
                status=400,
            )

    def start(
        self,
        ask: ServeAsk,
        placement: Placement,
        owner: Owner | None = None,
        *,
        input_tokens: int = 0,
    ) -> RunningTurn:
        """Start `ask`'s turn for `owner` where `placement` puts it (`Owners.place`)."""
        metadata: dict[str, Any] = {}
        if ask.json_schema:
            metadata[JSON_SCHEMA_OPTION] = dict(ask.json_schema)
        if placement.no_resume:
            metadata[NO_RESUME_OPTION] = True
        key = placement.session_key
        options = SimpleStreamOptions(
            reasoning=ask.reasoning,
            session_id=SESSION_PREFIX + key if key else None,
            metadata=metadata or None,
        )
        model = agy_model(ask.model)
        context = dataclasses.replace(ask.context, messages=placement.messages)
        stop = AbortSignal()
        try:
            stream = start_turn(
                HostTurn(model, context, options, None),
                stop,
                cwd=self.cwd,
                agy_bin=self.agy_bin,
            )
        except UsageError as exc:
            stream = AssistantMessageEventStream()
            stream.push(refusal(model, exc))
        turn = RunningTurn(
            dataclasses.replace(ask, context=context),
            stream,
            stop,
            self,
            owner=owner or Owner(),
            placement=placement,
            input_tokens=input_tokens,
        )
        self._running.add(turn)
        stream_done = asyncio.ensure_future(stream.turn_ended())
        stream_done.add_done_callback(lambda _: self._running.discard(turn))
        return turn

    @property
    def running(self) -> int:
        return len(self._running)

    async def stop_all(self, reason: str) -> None:
        """Abort every turn still running and wait until each has ended and agy is gone (a turn
        parked on a client's tool results included)."""
        for turn in list(self._running):
            turn.stop.abort(reason)
        try:
            await asyncio.wait_for(wait_for_turns(), _STOP_BOUND)
        except TimeoutError:
            log.warning("agy turns did not stop within %.0f s", _STOP_BOUND)


def final_message(event: AssistantMessageEvent) -> AssistantMessage | None:
    """The message a `done` or `error` event ends with."""
    if isinstance(event, DoneEvent):
        return event.message
    if isinstance(event, ErrorEvent):
        return event.error
    return None


async def check_request_images(context: Context) -> None:
    """Every image of the request decodes and is what it says (png, jpeg, gif, webp): a
    client's mistake is a 400 here, not a failed turn. Raises `RequestError`."""
    images = [
        block
        for message in context.messages
        if not isinstance(message, AssistantMessage) and not isinstance(message.content, str)
        for block in message.content
        if isinstance(block, ImageContent)
    ]
    if images:
        try:
            await off_loop(check_images, images)  # decoding megabytes: off the loop
        except UsageError as exc:
            raise RequestError(str(exc)) from exc
