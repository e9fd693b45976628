"""pi's provider contract for agy: `stream_simple(model, context, options)` and `complete_simple`.

Drives one turn: prompt → runner → database binding → event source → assembler → the host's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

from agy_provider.agy.models import model_arguments
from agy_provider.agy.step import TurnOutcome
from agy_provider.assembler import StepAssembler
from agy_provider.config import Config, load_config
from agy_provider.discovery import Binding, bind_database, conversations_dir, snapshot_stems
from agy_provider.errors import AgyError, UsageError
from agy_provider.events import AssistantMessageEvent, DoneEvent, ErrorEvent, StartEvent
from agy_provider.options import SimpleStreamOptions
from agy_provider.plugin_manager import event_sources, get_plugin_manager
from agy_provider.runner import AgyProcess, TurnRequest, agy_version, find_agy
from agy_provider.sessions import SessionRecord, SessionStore
from agy_provider.stream import AssistantMessageEventStream
from agy_provider.types import (
    AssistantMessage,
    Context,
    ImageContent,
    Message,
    Model,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["TurnContext", "build_prompt", "complete_simple", "history_digest", "stream_simple"]

log = logging.getLogger(__name__)

# pi's thinking levels -> agy's efforts.
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
# After agy exits, keep reading until the database stops changing for this many polls.
_DRAIN_QUIET_POLLS = 3
# When the server stops answering, how long to wait for agy's exit to explain it.
_EXIT_GRACE = 1.0
# agy's own --print-timeout sits above our deadline, so we (not agy) decide when a turn is too long.
_PRINT_TIMEOUT_MARGIN = 60.0


@dataclasses.dataclass(slots=True)
class TurnContext:
    """What plugins see of a turn (`turn` in hooks): its request, settings, and what it bound."""

    session_id: str
    prompt: str
    cwd: str
    config: Config
    event_source: str
    permissions: str
    min_index: int = -1
    binding: Binding | None = None
    process: AgyProcess | None = None
    endpoint: str = ""  # the language server an rpc turn bound (for observers), never a token


def _text_of(message: Message) -> str:
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return content
        return "".join(block.text for block in content if isinstance(block, TextContent))
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def history_digest(messages: Sequence[Message]) -> str:
    """A fingerprint of a conversation's user/assistant/tool texts (thinking is not history)."""
    canonical = [[type(m).__name__, _text_of(m)] for m in messages]
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False).encode()).hexdigest()


def build_prompt(context: Context, *, resume: bool) -> str:
    """The newest user message; for a new conversation, one compact preamble before it.

    The preamble is a pure function of the context, so the same history gives the same bytes and
    agy's prompt cache keeps working.
    """
    messages = list(context.messages)
    if not messages:
        raise UsageError("the context has no messages to send")
    newest = messages[-1]
    if not isinstance(newest, UserMessage):
        raise UsageError("the last message must be the user's (agy runs its own tools)")
    images = (
        []
        if isinstance(newest.content, str)
        else [b for b in newest.content if isinstance(b, ImageContent)]
    )
    if images:
        raise UsageError(
            f"the message has {len(images)} image(s), and agy-provider cannot send images to agy; "
            "describe them in text instead"
        )
    text = _text_of(newest)
    if resume:
        return text
    parts: list[str] = []
    if context.system_prompt:
        parts.append(f"<system>\n{context.system_prompt}\n</system>")
    earlier = messages[:-1]
    if earlier:
        lines = ["<conversation>"]
        for message in earlier:
            role = (
                "tool_result"
                if isinstance(message, ToolResultMessage)
                else ("user" if isinstance(message, UserMessage) else "assistant")
            )
            lines.append(f"<{role}>\n{_text_of(message)}\n</{role}>")
        lines.append("</conversation>")
        parts.append("\n".join(lines))
    return "\n\n".join([*parts, text]) if parts else text


def stream_simple(
    model: Model,
    context: Context,
    options: SimpleStreamOptions | None = None,
    *,
    cwd: str | None = None,
    agy_bin: str | None = None,
    event_source: str | None = None,
    store: SessionStore | None = None,
) -> AssistantMessageEventStream:
    """Start a turn with agy and return its event stream at once (call from a running loop).

    `start` is pushed immediately; every failure arrives as a final `error` event (an abort as
    reason `aborted`). With `options.session_id` the turn resumes that session's conversation.
    """
    stream = AssistantMessageEventStream()
    options = options or SimpleStreamOptions()
    assembler = StepAssembler(
        model=model.id,
        provider=model.provider or "agy",
        api=model.api or "agy",
        timestamp=int(time.time() * 1000),
    )
    for event in assembler.start():
        stream.push(event)
    turn = _Turn(model, context, options, stream, assembler, cwd, agy_bin, event_source, store)
    task = asyncio.get_running_loop().create_task(turn.run())
    _running.add(task)
    task.add_done_callback(_running.discard)
    return stream


async def complete_simple(
    model: Model, context: Context, options: SimpleStreamOptions | None = None, **kwargs: Any
) -> AssistantMessage:
    """Run a turn and return its final message (the `error` message when it failed)."""
    return await stream_simple(model, context, options, **kwargs).result()


_running: set[asyncio.Task[None]] = set()


class _Turn:
    """One turn from spawn to the final event. Each step a small method; every layer cleans up."""

    def __init__(
        self,
        model: Model,
        context: Context,
        options: SimpleStreamOptions,
        stream: AssistantMessageEventStream,
        assembler: StepAssembler,
        cwd: str | None,
        agy_bin: str | None,
        event_source: str | None,
        store: SessionStore | None,
    ) -> None:
        self.model = model
        self.context = context
        self.options = options
        self.stream = stream
        self.assembler = assembler
        self.cwd = cwd or os.getcwd()
        self.agy_bin = agy_bin
        self.event_source = event_source
        self.store = store or SessionStore()
        self.process: AgyProcess | None = None
        self.source: Any = None
        self.backup: Any = None  # the sqlite reader an rpc turn falls back to and drains from
        self.source_name = ""
        self.pm = get_plugin_manager()
        self.ctx: TurnContext | None = None
        self.final: AssistantMessage | None = None
        self.switch_to_backup = False
        self.version_task: asyncio.Task[str] | None = None

    def emit(self, events: Sequence[AssistantMessageEvent]) -> None:
        for event in events:
            if not isinstance(event, StartEvent):
                self.stream.push(event)
            if self.ctx is not None:
                self.pm.hook.observe_event(event=event, turn=self.ctx)

    async def run(self) -> None:
        try:
            await self._run()
        except AgyError as exc:
            await self._fail(str(exc))
        except asyncio.CancelledError:
            await self._fail("The turn was cancelled.", aborted=True)
            raise
        except Exception as exc:  # a bug of ours: still a clean error event, never a hang
            log.exception("turn failed")
            await self._fail(f"agy-provider failed unexpectedly: {type(exc).__name__}: {exc}")
        finally:
            await self._cleanup()

    async def _fail(self, message: str, *, aborted: bool = False) -> None:
        if self.process is not None:
            await self.process.terminate()
        if self.source is not None:
            self.emit(self.assembler.feed(self._safe_poll(force=True)))
        self.emit(self.assembler.finish(TurnOutcome(ok=False, aborted=aborted, error=message)))
        if not self.stream.done:  # finish() already ran: still say what happened
            self.stream.push(
                ErrorEvent(
                    reason="aborted" if aborted else "error", error=_bare_error(self.model, message)
                )
            )

    def _safe_poll(self, *, force: bool = False) -> list[Any]:
        try:
            return list(self.source.poll(force=force))
        except AgyError as exc:
            log.warning("last read failed: %s", exc)
            return []

    async def _cleanup(self) -> None:
        if self.version_task is not None and not self.version_task.done():
            self.version_task.cancel()
        if self.process is not None and self.process.returncode is None:
            await self.process.terminate()
        elif self.process is not None and self.process.survivors():
            await self.process.terminate(grace=0.5)
        for source in {id(s): s for s in (self.source, self.backup) if s is not None}.values():
            await source.aclose()

    # -- the happy path, one concern per method ---------------------------------------------

    async def _run(self) -> None:
        config = load_config()
        session_id = self.options.session_id or ""
        record = self.store.get(session_id) if session_id else None
        resume = record is not None and record.history_digest == history_digest(
            list(self.context.messages)[:-1]
        )
        prompt = build_prompt(self.context, resume=resume)
        self.ctx = TurnContext(
            session_id=session_id,
            prompt=prompt,
            cwd=self.cwd,
            config=config,
            event_source=self.event_source or config.event_source,
            permissions=config.permissions,
            min_index=record.last_step_index if resume and record else -1,
        )
        self.source_name = self._choose_source()
        self.assembler.begin_after(self.ctx.min_index + 1)
        conversation_id = record.conversation_id if resume and record else ""
        await self._spawn(config, prompt, conversation_id)
        await self._bind(config, prompt, conversation_id)
        await self._open_source(self.source_name)
        outcome = await self._stream(config)
        self._settle(outcome)
        if session_id:
            await self._remember(session_id, self.source_name)

    def _choose_source(self) -> str:
        assert self.ctx is not None
        available = list(event_sources())
        name = self.pm.hook.choose_event_source(turn=self.ctx, available=available)
        if not name:
            raise UsageError(
                f"event source {self.ctx.event_source!r} is not available here "
                f"(available: {', '.join(available) or 'none'})"
            )
        return str(name)

    async def _spawn(self, config: Config, prompt: str, conversation_id: str) -> None:
        assert self.ctx is not None
        binary = find_agy(self.agy_bin or config.agy_bin)
        effort = _EFFORTS.get(self.options.reasoning or "", "") or config.thinking
        model_id = self.model.id if self.model.id not in ("", "agy", "default") else config.model
        env = {"ANTIGRAVITY_APP_DATA_DIR": config.app_data_dir} if config.app_data_dir else {}
        request = TurnRequest(
            prompt=prompt,
            cwd=self.cwd,
            agy_bin=binary,
            model_args=model_arguments(model_id, effort),
            mode=config.mode,
            skip_permissions=config.permissions == "skip",
            conversation_id=conversation_id,
            print_timeout=config.turn_timeout + _PRINT_TIMEOUT_MARGIN,
            # Only an rpc-capable turn needs the token; agy builds before 1.2.2 may reject the flag.
            csrf_token=secrets.token_hex(16)
            if config.csrf and self.ctx.event_source in ("rpc", "auto")
            else "",
            env=env,
        )
        self.ctx.config = config
        self.folder = conversations_dir(config.app_data_dir)
        self.before = snapshot_stems(self.folder)
        self.process = AgyProcess(request)
        self.ctx.process = self.process
        self.started = asyncio.get_running_loop().time()
        # Learned beside the turn (cached per binary), for the session record.
        self.version_task = asyncio.get_running_loop().create_task(agy_version(binary))
        await self.process.start()

    async def _bind(self, config: Config, prompt: str, conversation_id: str) -> None:
        assert self.ctx is not None and self.process is not None
        process = self.process
        self.ctx.binding = await bind_database(
            self.folder,
            self.before,
            process.tree,
            prompt=prompt,
            exited=lambda: process.returncode is not None,
            timeout=min(config.idle_timeout, config.turn_timeout),
            expected_id=conversation_id,
        )

    async def _open_source(self, name: str) -> None:
        """Open the chosen source; under `auto`, an rpc source that cannot start falls back."""
        spec = event_sources()[name]
        source = spec.factory(self.ctx)
        try:
            await source.open()
        except AgyError as exc:
            await source.aclose()
            if name == "sqlite" or not self._may_fall_back():
                raise
            log.warning("the %s event source could not start (%s); reading the database", name, exc)
            self.source = await self._open_backup()
            self.source_name = "sqlite"
            return
        self.source = source

    def _may_fall_back(self) -> bool:
        assert self.ctx is not None
        return self.ctx.event_source == "auto" and "sqlite" in event_sources()

    async def _open_backup(self) -> Any:
        """The sqlite reader of the bound database, opened once and shared."""
        if self.backup is None:
            backup = event_sources()["sqlite"].factory(self.ctx)
            await backup.open()
            self.backup = backup
        return self.backup

    async def _poll(self) -> list[Any]:
        """The source's changes; under `auto`, a failing rpc source is replaced by the database."""
        try:
            return list(self.source.poll())
        except AgyError as exc:
            assert self.process is not None
            # agy exiting takes its server along; the exit may not be reaped yet, so look.
            exited = await self.process.wait(_EXIT_GRACE) is not None
            if exited and self.source_name != "sqlite":
                return []  # the drain reads the database
            if self.source_name == "sqlite" or not self._may_fall_back():
                raise
            log.warning(
                "the %s event source failed (%s); finishing from the database",
                self.source_name,
                exc,
            )
            self.switch_to_backup = True
            return []

    async def _stream(self, config: Config) -> TurnOutcome:
        """Feed snapshots until agy exits, the host aborts, or a deadline passes."""
        assert self.process is not None
        loop = asyncio.get_running_loop()
        signal = self.options.signal
        exit_task = loop.create_task(self.process.wait())
        abort_task = loop.create_task(signal.wait()) if signal is not None else None
        last_progress = loop.time()
        try:
            while True:
                changed = await self._poll()
                if self.switch_to_backup:
                    self.switch_to_backup = False
                    old, self.source = self.source, await self._open_backup()
                    self.source_name = "sqlite"
                    await old.aclose()
                    changed = await self._poll()
                if changed:
                    last_progress = loop.time()
                    self.emit(self.assembler.feed(changed))
                now = loop.time()
                if signal is not None and signal.aborted:
                    await self.source.cancel()
                    await self.process.terminate()
                    await self._drain()
                    return TurnOutcome(aborted=True, error="The turn was aborted.")
                if exit_task.done():
                    await self._drain()
                    return self._exit_outcome(exit_task.result())
                if now - self.started > config.turn_timeout:
                    return await self._deadline(
                        f"agy did not finish within {config.turn_timeout:.0f}s (the turn deadline); "
                        "raise turn_timeout (AGY_TURN_TIMEOUT) for long tasks"
                    )
                if getattr(self.source, "deciding", 0):
                    last_progress = now  # waiting on our own decision hooks is not agy hanging
                if now - last_progress > config.idle_timeout:
                    return await self._deadline(
                        f"agy made no progress for {config.idle_timeout:.0f}s (the idle deadline); "
                        "it may be hung or waiting on a prompt. Raise idle_timeout (AGY_IDLE_TIMEOUT) "
                        "or check agy on its own"
                    )
                wait_task = loop.create_task(self.source.wait(1.0))
                waits = {wait_task, exit_task, *([abort_task] if abort_task else [])}
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                wait_task.cancel()
        finally:
            if abort_task is not None:
                abort_task.cancel()
            if not exit_task.done():
                exit_task.cancel()

    async def _deadline(self, message: str) -> TurnOutcome:
        assert self.process is not None
        await self.process.terminate()
        await self._drain()
        return TurnOutcome(ok=False, error=message)

    async def _drain(self) -> None:
        """Take what the source still holds, then read the database until it is quiet.

        After agy exits its language server is gone with it, so the database — the ground truth —
        gives the last word; the assembler drops whatever was already streamed.
        """
        if self.source_name == "sqlite":
            self.emit(self.assembler.feed(self._safe_poll()))
        else:
            # What the stream delivered before agy exited; its server went with it, so a
            # failure to reach it now is expected and the database below has the rest.
            with contextlib.suppress(AgyError):
                self.emit(self.assembler.feed(self.source.poll()))
            try:
                self.source = await self._open_backup()
            except AgyError as exc:
                log.warning("could not read the database for the final drain: %s", exc)
                return
            self.source_name = "sqlite"
        quiet = 0
        while quiet < _DRAIN_QUIET_POLLS:
            changed = self._safe_poll(force=quiet == 0)
            if changed:
                self.emit(self.assembler.feed(changed))
                quiet = 0
            else:
                quiet += 1

    def _exit_outcome(self, code: int | None) -> TurnOutcome:
        assert self.process is not None
        if code:
            stderr = self.process.stderr_text().strip()
            tail = stderr[-2000:] if stderr else "(nothing on stderr)"
            return TurnOutcome(ok=False, error=f"agy exited with code {code}: {tail}")
        if not self.assembler.has_text() and not self.assembler.has_failure():
            return TurnOutcome(
                ok=False,
                error=(
                    "agy finished without an answer (exit 0, no text). This happens when a "
                    "permission was denied in print mode or --print-timeout expired; try "
                    "permissions=skip (AGY_PERMISSIONS=skip) or the rpc event source"
                ),
            )
        return TurnOutcome()

    def _settle(self, outcome: TurnOutcome) -> None:
        events = self.assembler.finish(outcome)
        self.emit(events)
        last = events[-1] if events else None
        self.final = last.message if isinstance(last, DoneEvent) else None

    async def _remember(self, session_id: str, source_name: str) -> None:
        assert self.ctx is not None and self.ctx.binding is not None
        version = await self.version_task if self.version_task is not None else ""
        history = [*self.context.messages]
        if self.final is not None:
            history.append(self.final)
        self.store.put(
            session_id,
            SessionRecord(
                conversation_id=self.ctx.binding.conversation_id,
                last_step_index=self.source.last_final_index(),
                event_source=source_name,
                agy_version=version,
                history_digest=history_digest(history),
            ),
        )


def _bare_error(model: Model, message: str) -> AssistantMessage:
    return AssistantMessage(
        content=(),
        api=model.api or "agy",
        provider=model.provider or "agy",
        model=model.id,
        stop_reason="error",
        error_message=message,
        timestamp=0,
    )
