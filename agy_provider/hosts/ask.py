"""AskAntigravity: hand one task to agy and get its answer back, for any host.

`ask_antigravity` (async) and `ask_antigravity_sync` run one agy turn — a new conversation or one
to continue — and return an `AskResult` (the pi tool is `ask_tool`, the CLI `ask_command`).
Refuses to run inside an agy turn (agy would start agy).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import os
import time
import uuid
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Literal
from typing import ParamSpec
from typing import TypeAlias

from agy_provider.agy.state_folder import chosen_state_folder
from agy_provider.agy.state_folder import is_simulator
from agy_provider.assembly.tool_runs import TOOL_RUN_MARK
from agy_provider.errors import UsageError
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.host_input import HostTurn
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.stream import TurnFacts
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Model
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import Usage
from agy_provider.pi.types import UserMessage
from agy_provider.store.config import Config
from agy_provider.store.config import load_config
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore
from agy_provider.store.sessions import valid_conversation_id

__all__ = [
    "ASK_TOOL_NAME",
    "MODES",
    "THINKING_LEVELS",
    "TURN_ENV",
    "AskResult",
    "ProgressCallback",
    "ask_antigravity",
    "ask_antigravity_sync",
    "nested_turn_reason",
    "turn_edges",
]

# Set in agy's environment by the runner for the turns agy-provider starts, so agy's own children
# (a `run_command` that calls `agy-provider ask`) can tell they run inside an agy turn.
TURN_ENV = "AGY_PROVIDER_TURN"
# Process names of agy itself (and of the simulator that stands in for it): an ancestor by one of
# these names means this process is one of agy's tool runs, whoever started agy.
_AGY_PROCESS_NAMES = frozenset({"agy", "agy-sim"})

Thinking: TypeAlias = Literal["low", "medium", "high"]
Mode: TypeAlias = Literal["default", "plan", "accept-edits"]
THINKING_LEVELS = ("low", "medium", "high")
MODES = ("default", "plan", "accept-edits")

ProgressCallback: TypeAlias = Callable[[float, str], object]
"""Called with (seconds since the call began, the current step): `starting agy`, `thinking`,
`▸ run_command ls`, `answering`, then `done` or `failed`."""

ASK_TOOL_NAME = "AskAntigravity"

Status: TypeAlias = Literal["ok", "error", "aborted"]


@dataclasses.dataclass(frozen=True, slots=True)
class AskResult:
    """How a delegated turn ended.

    `answer` is agy's answer text; `model` the model that answered (as agy recorded it);
    `conversation_id` the agy conversation (continue it with `conversation=`; "" when agy never
    started one); `usage` pi's token counts; `duration` seconds; `status` ok, error or aborted,
    with `error` saying what failed in agy's own words; `exit_code` agy's, when it had exited.
    """

    answer: str
    model: str
    conversation_id: str
    usage: Usage
    duration: float
    status: Status
    error: str | None = None
    exit_code: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON, as pi's own types write it."""
        return {
            "answer": self.answer,
            "model": self.model,
            "conversationId": self.conversation_id,
            "usage": self.usage.to_json(),
            "durationMs": round(self.duration * 1000),
            "status": self.status,
            "error": self.error,
            "exitCode": self.exit_code,
        }

    def tool_text(self) -> str:
        """What a host's model reads as the tool's result: the answer (or the failure) and a
        last line naming the model and the conversation to continue."""
        body = self.answer if self.ok else f"agy failed: {self.error or 'the turn failed'}"
        facts = [f"model {self.model}"] if self.model else []
        if self.conversation_id:
            facts.append(f"conversation {self.conversation_id}")
        facts.append(f"{self.duration:.1f} s")
        return f"{body}\n\n[{ASK_TOOL_NAME}: {', '.join(facts)}]"


# --- refusing to recurse ----------------------------------------------------------------------


def nested_turn_reason(env: Mapping[str, str] | None = None) -> str:
    """Why this process runs inside an agy turn ("" when it does not): agy-provider's marker in
    the environment, or an agy process among its ancestors."""
    env = os.environ if env is None else env
    if env.get(TURN_ENV):
        return f"{TURN_ENV} is set: this process was started inside an agy turn"
    import psutil

    try:
        ancestors = psutil.Process().parents()
    except psutil.Error:
        return ""
    for proc in ancestors:
        try:
            # The kernel's name, and the program as started (a wrapper may exec under another).
            names = {proc.name(), *(os.path.basename(arg) for arg in proc.cmdline()[:1])}
        except psutil.Error:
            continue
        for name in sorted(names & _AGY_PROCESS_NAMES):
            return f"its ancestor process {proc.pid} is {name}"
    return ""


# --- one turn's settings ----------------------------------------------------------------------


class _MemoryStore(SessionStore):
    """A session store for one call, held in memory: AskAntigravity names the conversation to
    continue itself (`conversation_id=`) and keeps nothing in the user's session store."""

    def __init__(self) -> None:
        super().__init__(Path(f"<ask {uuid.uuid4().hex}>"))
        self._mine: dict[str, SessionRecord] = {}

    def get(self, session_id: str) -> SessionRecord | None:
        return self._mine.get(session_id)

    def all(self) -> Mapping[str, SessionRecord]:
        return dict(self._mine)

    def put(self, session_id: str, record: SessionRecord) -> None:
        self._mine[session_id] = record

    def put_many(self, records: Mapping[str, SessionRecord]) -> None:
        self._mine.update(records)

    def save_later(self, records: Mapping[str, SessionRecord]) -> concurrent.futures.Future[None]:
        self._mine.update(records)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done

    def delete(self, session_id: str) -> None:
        self._mine.pop(session_id, None)


def turn_edges(
    *,
    mode: str | None = None,
    timeout: float | None = None,
    store: SessionStore | None = None,
    agy_bin: str | None = None,
) -> Any:
    """`TurnEdges` whose settings are the configured ones with this turn's `mode` and
    `timeout` (the turn deadline, seconds) in place; bad values raise `UsageError` by name.

    With the simulator as agy (`agy_bin`, else the configured binary, named `agy-sim`) and no
    state folder chosen, the turn looks for agy-sim's conversations in the simulator's own folder,
    where agy-sim writes them (as `agy-provider chat` does).
    """
    from agy_provider.live.turn import TurnEdges

    overrides: dict[str, Any] = {}
    if mode is not None:
        overrides["mode"] = mode
    if timeout is not None:
        overrides["turn_timeout"] = float(timeout)

    def config() -> Config:
        settings = dataclasses.replace(load_config(), **overrides)
        binary = agy_bin or settings.agy_bin
        if not settings.app_data_dir and is_simulator(binary):
            settings = dataclasses.replace(
                settings, app_data_dir=chosen_state_folder(binary, settings.app_data_dir)
            )
        return settings

    config()  # refuse bad values now, by name
    edges = TurnEdges(config=config)
    if store is not None:
        edges.store = store
    return edges


@dataclasses.dataclass(slots=True)
class _Plan:
    model: Model
    context: Context
    options: SimpleStreamOptions
    kwargs: dict[str, Any]
    session_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Request:
    """What the caller asked for, as `ask_antigravity` takes it (with its defaults: the sync
    twin passes on only the arguments its caller gave)."""

    prompt: str
    cwd: str | None = None
    model: str = ""
    thinking: str | None = None
    mode: str | None = None
    conversation: str | None = None
    timeout: float | None = None
    agy_bin: str | None = None


_REQUEST_FIELDS = frozenset(_Request.__dataclass_fields__) - {"prompt"}


def _plan(request: _Request, signal: AbortSignal | None) -> _Plan:
    """Check the request and settle everything the turn needs (reads files: off the loop)."""
    prompt, cwd, model, thinking = request.prompt, request.cwd, request.model, request.thinking
    mode, conversation, timeout, agy_bin = (
        request.mode, request.conversation, request.timeout, request.agy_bin,
    )  # fmt: skip
    reason = nested_turn_reason()
    if reason:
        raise UsageError(
            f"AskAntigravity refuses to run inside an agy turn ({reason}): agy would start agy "
            "again. Do the work in the current turn instead."
        )
    if not isinstance(prompt, str) or not prompt.strip():
        raise UsageError("AskAntigravity needs a prompt: the task for agy, as text")
    if thinking is not None and thinking not in THINKING_LEVELS:
        raise UsageError(f"thinking must be low, medium or high, not {thinking!r}")
    if mode is not None and mode not in MODES:
        raise UsageError(f"mode must be plan, accept-edits or default, not {mode!r}")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
    ):
        raise UsageError(f"timeout must be a number of seconds, not {timeout!r}")
    folder = os.path.abspath(cwd) if cwd else os.getcwd()
    if not os.path.isdir(folder):
        raise UsageError(f"cwd {folder} is not a folder")
    from agy_provider.live.discovery import conversations_dir
    from agy_provider.live.runner import find_agy
    from agy_provider.store.model_catalog import cached_models
    from agy_provider.store.model_catalog import resolve_model

    edges = turn_edges(mode=mode, timeout=timeout, store=_MemoryStore(), agy_bin=agy_bin)
    config: Config = edges.config()
    binary = find_agy(agy_bin or config.agy_bin)
    slug = ""
    if model.strip():
        from agy_provider.agy.models import model_arguments

        catalog = cached_models(binary)
        slug = resolve_model(model, catalog)
        model_arguments(slug, thinking or "", catalog)  # an effort the model lacks: UsageError
    session_id = f"ask-{uuid.uuid4().hex}"
    if conversation is not None:
        if not valid_conversation_id(conversation):
            raise UsageError(f"not an agy conversation id: {conversation!r}")
        path = conversations_dir(config.app_data_dir) / f"{conversation}.db"
        if not path.is_file():
            raise UsageError(
                f"agy has no conversation {conversation} ({path} does not exist): pass the id an "
                "earlier answer gave, with the same agy state folder"
            )
    pi_model = agy_model(slug or "agy")
    options = SimpleStreamOptions(
        session_id=session_id,
        reasoning=thinking,  # type: ignore[arg-type]  # checked above: low, medium or high
        signal=signal,
    )
    return _Plan(
        model=pi_model,
        context=Context(messages=[UserMessage(content=prompt, timestamp=int(time.time() * 1000))]),
        options=options,
        kwargs={
            "cwd": folder,
            "agy_bin": binary,
            "store": edges.store,
            "conversation_id": conversation or "",
            "edges": edges,
        },
        session_id=session_id,
    )


# --- following the turn -----------------------------------------------------------------------


class _Progress:
    """Turns the events of a turn into steps for the progress callback, and keeps its end."""

    def __init__(self, callback: ProgressCallback | None, started: float) -> None:
        self.callback = callback
        self.started = started
        self.step = ""
        self.message: AssistantMessage | None = None
        self._thinking_open = False

    def say(self, step: str) -> None:
        if step == self.step:
            return
        self.step = step
        if self.callback is not None:
            self.callback(time.monotonic() - self.started, step)

    def feed(self, event: AssistantMessageEvent) -> None:
        kind = event.type
        if kind == "start":
            self.say("starting agy")
        elif kind == "thinking_start":
            self._thinking_open = True
        elif kind == "thinking_delta" and self._thinking_open:
            self._thinking_open = False  # the first delta tells a tool run from thinking
            run = event.tool_run if isinstance(event, ThinkingDeltaEvent) else None
            if run is None:
                self.say("thinking")
            else:  # the run's first line, as its thinking block shows it
                header = f"{TOOL_RUN_MARK}{run.name} {run.argument}".rstrip()
                self.say(header.partition("\n")[0])
        elif kind == "text_start":
            self.say("answering")
        elif isinstance(event, DoneEvent):
            self.message = event.message
            self.say("done")
        elif isinstance(event, ErrorEvent):
            self.message = event.error
            self.say("aborted" if event.reason == "aborted" else "failed")

    def result(self, facts: TurnFacts, model: Model) -> AskResult:
        duration = time.monotonic() - self.started
        message = self.message
        if message is None:  # the stream ended without its final event: a bug, still said
            return AskResult(
                answer="",
                model=model.id,
                conversation_id=facts.conversation_id,
                usage=Usage(),
                duration=duration,
                status="error",
                error="the turn ended without a final event",
                exit_code=facts.exit_code,
            )
        answer = "".join(b.text for b in message.content if isinstance(b, TextContent))
        status: Status = (
            "aborted"
            if message.stop_reason == "aborted"
            else "error"
            if message.stop_reason == "error"
            else "ok"
        )
        return AskResult(
            answer=answer,
            model=message.model if message.model not in ("", "agy") else "",
            conversation_id=facts.conversation_id,
            usage=message.usage,
            duration=duration,
            status=status,
            error=message.error_message if status != "ok" else None,
            exit_code=facts.exit_code,
        )


P = ParamSpec("P")

# --- the calls --------------------------------------------------------------------------------


async def ask_antigravity(
    prompt: str,
    *,
    cwd: str | None = None,
    model: str = "",
    thinking: Thinking | None = None,
    mode: Mode | None = None,
    conversation: str | None = None,
    timeout: float | None = None,
    on_progress: ProgressCallback | None = None,
    signal: AbortSignal | None = None,
    agy_bin: str | None = None,
) -> AskResult:
    """Run `prompt` as one agy turn and return how it ended (never raises for a failed turn:
    `status` and `error` say so).

    `model`: flash, pro, sonnet, opus or a slug agy lists (default: the configured model);
    `thinking`: low, medium or high; `mode`: plan, accept-edits or default; `conversation`: an
    agy conversation id to continue; `timeout`: seconds for the whole turn; `on_progress(elapsed,
    step)` is called as the turn moves on; `signal` aborts the turn (so does cancelling this
    call). Raises `UsageError` for bad arguments, when run inside an agy turn, or for a model agy
    does not offer, and `AgyError` when agy cannot be found or lists no models.
    """
    started = time.monotonic()
    own = AbortSignal()
    from agy_provider.workers import off_loop

    request = _Request(prompt, cwd, model, thinking, mode, conversation, timeout, agy_bin)
    plan = await off_loop(_plan, request, own)
    from agy_provider.hosts.turns import start_turn

    progress = _Progress(on_progress, started)
    linked: asyncio.Future[None] | None = None
    if signal is not None:
        linked = asyncio.ensure_future(signal.wait())
        linked.add_done_callback(lambda _: own.abort(signal.reason))
    try:
        turn = HostTurn(plan.model, plan.context, plan.options, abort=None)
        stream = start_turn(turn, own, **plan.kwargs)
        async for event in stream:
            progress.feed(event)
    except asyncio.CancelledError:
        own.abort("AskAntigravity was cancelled")
        raise
    finally:
        if linked is not None:
            linked.cancel()
    return progress.result(stream.facts, plan.model)


def _same_arguments_as(
    twin: Callable[P, Awaitable[AskResult]],
) -> Callable[[Callable[..., AskResult]], Callable[P, AskResult]]:
    """Give the decorated function `twin`'s parameters: for mypy (ParamSpec) and for `help()`
    (`inspect.signature` follows `__wrapped__`)."""

    def decorate(function: Callable[..., AskResult]) -> Callable[P, AskResult]:
        function.__wrapped__ = twin  # type: ignore[attr-defined]
        return function

    return decorate


@_same_arguments_as(ask_antigravity)
def ask_antigravity_sync(
    prompt: str,
    *,
    on_progress: ProgressCallback | None = None,
    signal: AbortSignal | None = None,
    **request: Any,
) -> AskResult:
    """`ask_antigravity` for callers without an event loop (through `agy_provider.hosts.sync`);
    it takes the same arguments.

    KeyboardInterrupt (or any exception in `on_progress`) aborts the turn and leaves no agy
    running before it propagates.
    """
    from agy_provider.hosts.sync import iter_events

    started = time.monotonic()
    for name in request.keys() - _REQUEST_FIELDS:
        raise TypeError(f"ask_antigravity_sync() got an unexpected keyword argument {name!r}")
    plan = _plan(_Request(prompt, **request), signal)
    progress = _Progress(on_progress, started)
    events = iter_events(plan.model, plan.context, plan.options, **plan.kwargs)
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as ended:  # the events ran out: the turn's facts come back
                facts: TurnFacts = ended.value
                break
            progress.feed(event)
    finally:
        events.close()
    return progress.result(facts, plan.model)
