"""The `llm` plugin (entry-point group `llm`): agy's models in Simon Willison's `llm` CLI.

Registers `agy` (the configured default) and `agy/<model>` for every model `agy models` lists
(read from the catalog kept per binary, so llm's listing of models on every run rarely spawns
agy), with the options `thinking` and `mode`. Text and reasoning stream; agy's own tool runs are
logged as server-executed tool calls and results; one llm conversation is one agy conversation
(sessions keyed by llm's conversation id); input and output tokens go to llm's log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncGenerator
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from typing import Literal

import llm
from llm.parts import StreamEvent
from pydantic import Field

# agy_provider is imported inside functions: llm imports every plugin on every run, and a run
# that never uses agy should not pay for the provider (asyncio, psutil, httpx).

__all__ = ["AgyAsyncModel", "AgySyncModel", "EventsToLlm", "locate_agy", "register_models"]

log = logging.getLogger(__name__)

DEFAULT_MODEL_ID = "agy"
MODEL_PREFIX = "agy/"


class AgyOptions(llm.Options):
    """The options `llm -o` takes for agy's models."""

    thinking: Literal["low", "medium", "high"] | None = Field(
        default=None,
        description="How hard the model thinks (agy's --effort), for models with effort levels",
    )
    mode: Literal["default", "plan", "accept-edits"] | None = Field(
        default=None,
        description="plan: agy plans without changing files; accept-edits: agy edits files "
        "without asking; default: agy's request-review (the configured mode when unset)",
    )


@llm.hookimpl
def register_models(register: Any) -> None:
    """`agy`, then `agy/<model>` for each model agy lists, with `agy/flash` … as aliases."""
    catalog = _catalog()
    register(AgySyncModel(DEFAULT_MODEL_ID, ""), AgyAsyncModel(DEFAULT_MODEL_ID, ""))
    if not catalog:
        return
    from agy_provider.errors import UsageError
    from agy_provider.store.model_catalog import ALIASES
    from agy_provider.store.model_catalog import resolve_model

    aliases: dict[str, list[str]] = {}
    for word in ALIASES:
        try:
            aliases.setdefault(resolve_model(word, catalog), []).append(MODEL_PREFIX + word)
        except UsageError:
            continue  # agy lists no model of that family
    for model in catalog:
        model_id = MODEL_PREFIX + model.id
        register(
            AgySyncModel(model_id, model.id, model.efforts),
            AgyAsyncModel(model_id, model.id, model.efforts),
            aliases=aliases.get(model.id, []),
        )


def _catalog() -> list[Any]:
    """agy's models from the kept catalog ([] when agy is missing or lists none: said at debug
    level, since llm asks on every run; `llm -m agy` then fails saying why)."""
    from agy_provider.errors import AgyError
    from agy_provider.store.config import load_config
    from agy_provider.store.model_catalog import cached_models

    try:
        binary = locate_agy(load_config().agy_bin)
        if binary is None:
            log.debug("agy's models are not listed in llm: no agy binary was found")
            return []
        return cached_models(binary)
    except AgyError as exc:
        log.debug("agy's models are not listed in llm: %s", exc)
        return []


def locate_agy(configured: str) -> str | None:
    """Where `runner.find_agy` finds agy (the configured path or name, on PATH, then beside this
    Python), without importing the runner: llm lists models on every run, and the runner (psutil,
    asyncio) would almost double what every `llm` command costs to start."""
    candidate = configured or "agy"
    if os.sep in candidate:
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    import shutil
    import sys

    return shutil.which(candidate) or shutil.which(candidate, path=os.path.dirname(sys.executable))


class _AgyModelBase:
    """What the sync and async models share: identity, options and how a prompt becomes a turn."""

    model_id: str
    can_stream = True
    # llm's tools reach agy through the MCP bridge; llm's chain runs each call (with its own
    # approval hooks) between two `execute` calls while agy's turn waits, parked, for the results.
    supports_tools = True
    supports_schema = False

    def __init__(self, model_id: str, agy_id: str, efforts: Sequence[str] = ()) -> None:
        self.model_id = model_id
        self.agy_id = agy_id
        self.efforts = tuple(efforts)

    def __str__(self) -> str:
        efforts = f" (thinking: {', '.join(self.efforts)})" if self.efforts else ""
        return f"agy: {self.model_id}{efforts}"

    def _turn(self, prompt: llm.Prompt, conversation: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
        """pi's model, context, options and `stream_simple`'s keywords for this prompt."""
        from agy_provider.hosts.ask import turn_edges
        from agy_provider.pi.agy_model import agy_model
        from agy_provider.pi.options import SimpleStreamOptions

        options = prompt.options
        thinking = getattr(options, "thinking", None)
        mode = getattr(options, "mode", None)
        if thinking and self.efforts and thinking not in self.efforts:
            # agy would refuse the --effort after starting; say which ones the model has.
            raise ValueError(
                f"{self.model_id} offers thinking {', '.join(self.efforts)}, not {thinking}"
            )
        model = agy_model(self.agy_id or "agy")
        conversation_id = getattr(conversation, "id", None)
        session = f"llm:{conversation_id}" if conversation_id else None
        kwargs: dict[str, Any] = {
            "cwd": os.getcwd(),
            # llm's conversation id names the agy conversation: `llm -c` always continues it,
            # sending only the new prompt (llm's own history is the same conversation).
            "continue_session": session is not None,
            "edges": turn_edges(mode=mode),
        }
        return (
            model,
            _context(prompt),
            SimpleStreamOptions(session_id=session, reasoning=thinking),
            kwargs,
        )


def _context(prompt: llm.Prompt) -> Any:
    """llm's messages (system, user, assistant text and tool calls, tool results) and tools as
    pi's context; the newest message is the user's, or the results of the tools agy called."""
    from llm.parts import ToolCallPart
    from llm.parts import ToolResultPart

    from agy_provider.pi.types import AssistantMessage
    from agy_provider.pi.types import Context
    from agy_provider.pi.types import TextContent
    from agy_provider.pi.types import Tool
    from agy_provider.pi.types import ToolCall
    from agy_provider.pi.types import ToolResultMessage
    from agy_provider.pi.types import UserMessage

    system: list[str] = []
    messages: list[Any] = []
    for message in prompt.messages:
        text = "".join(getattr(part, "text", "") for part in message.parts if _is_text(part))
        if message.role == "system":
            system.append(text)
        elif message.role == "user" and text:
            messages.append(UserMessage(content=text, timestamp=0))
        elif message.role == "assistant":
            calls = [
                ToolCall(id=p.tool_call_id or "", name=p.name, arguments=dict(p.arguments))
                for p in message.parts
                if isinstance(p, ToolCallPart) and not p.server_executed
            ]
            if text or calls:
                messages.append(
                    AssistantMessage(
                        content=[*([TextContent(text=text)] if text else []), *calls],
                        api="agy",
                        provider="agy",
                        model="agy",
                        stop_reason="toolUse" if calls else "stop",
                        timestamp=0,
                    )
                )
        elif message.role == "tool":
            messages.extend(
                ToolResultMessage(
                    tool_call_id=p.tool_call_id or "",
                    tool_name=p.name,
                    content=[TextContent(text=p.output)],
                    is_error=p.exception is not None,
                    timestamp=0,
                )
                for p in message.parts
                if isinstance(p, ToolResultPart) and not p.server_executed
            )
    if not messages or not isinstance(messages[-1], UserMessage | ToolResultMessage):
        messages.append(UserMessage(content=prompt.prompt or "", timestamp=0))
    tools = [
        Tool(t.name, t.description or "", dict(t.input_schema or {"type": "object"}))
        for t in prompt.tools or ()
    ]
    return Context(
        system_prompt="\n\n".join(s for s in system if s) or None,
        messages=messages,
        tools=tools or None,
    )


def _is_text(part: Any) -> bool:
    from llm.parts import TextPart

    return isinstance(part, TextPart)


class EventsToLlm:
    """pi events → llm `StreamEvent`s. Thinking becomes reasoning; a tool run agy made becomes
    a server-executed tool call and, once it settled, its result — and stays in the reasoning
    too, so `llm` shows it live (llm prints only text and reasoning as they stream)."""

    def __init__(self) -> None:
        self._kinds: dict[int, str] = {}
        self._reasoning_ends_line = True
        self.message: Any = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = event.type
        index = getattr(event, "content_index", -1)
        out: list[StreamEvent] = []
        if kind == "text_delta":
            out.append(StreamEvent(type="text", chunk=event.delta))
        elif kind == "thinking_delta":
            if index not in self._kinds:
                run = event.tool_run
                self._kinds[index] = "tool" if run is not None else "thinking"
                if not self._reasoning_ends_line:  # each block on a line of its own
                    out.append(StreamEvent(type="reasoning", chunk="\n"))
                if run is not None:
                    call_id = f"agy-tool-{index}"
                    out.append(_tool_event("tool_call_name", run.name, call_id))
                    out.append(
                        _tool_event(
                            "tool_call_args", json.dumps({"argument": run.argument}), call_id
                        )
                    )
            out.append(StreamEvent(type="reasoning", chunk=event.delta))
            self._reasoning_ends_line = event.delta.endswith("\n")
        elif kind == "thinking_end" and self._kinds.get(index) == "tool":
            run = event.tool_run
            if run is not None:
                result = _tool_event("tool_result", run.result, f"agy-tool-{index}")
                result.tool_name = run.name
                out.append(result)
        elif kind == "toolcall_end":
            # A call of one of llm's tools (through the MCP bridge): llm's chain runs it.
            call = event.tool_call
            for part, chunk in (("tool_call_name", call.name), ("tool_call_args", _json(call))):
                out.append(StreamEvent(type=part, chunk=chunk, tool_call_id=call.id))
        elif kind == "done":
            self.message = event.message
        elif kind == "error":
            self.message = event.error
        return out


def _json(call: Any) -> str:
    return json.dumps(dict(call.arguments), ensure_ascii=False)


def _tool_event(kind: str, chunk: str, call_id: str) -> StreamEvent:
    return StreamEvent(type=kind, chunk=chunk, tool_call_id=call_id, server_executed=True)


def _finish(response: Any, message: Any) -> None:
    """Usage and the answering model into llm's log; a failed turn raises llm's ModelError."""
    if message is None:
        raise llm.ModelError("agy's turn ended without a final event")
    usage = message.usage
    details = {"cache_read_tokens": usage.cache_read} if usage.cache_read else None
    # llm counts all input the model read (as its OpenAI models do); cached input is in details.
    response.set_usage(input=usage.input + usage.cache_read, output=usage.output, details=details)
    if message.model and message.model not in ("agy", DEFAULT_MODEL_ID):
        response.set_resolved_model(message.model)
    if message.stop_reason in ("error", "aborted"):
        raise llm.ModelError(f"agy: {message.error_message or 'the turn failed'}")
    for block in message.content:
        if getattr(block, "type", "") == "toolCall":  # for llm's chain to run (agy waits)
            response.add_tool_call(
                llm.ToolCall(
                    name=block.name, arguments=dict(block.arguments), tool_call_id=block.id
                )
            )


class AgySyncModel(_AgyModelBase, llm.Model):
    """An agy model for `llm -m`: one agy turn per prompt, through `agy_provider.hosts.sync`."""

    class Options(AgyOptions):
        pass

    def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.Response,
        conversation: llm.Conversation | None,
    ) -> Iterator[StreamEvent]:
        from agy_provider.hosts.sync import iter_events

        model, context, options, kwargs = self._turn(prompt, conversation)
        mapper = EventsToLlm()
        events = iter_events(model, context, options, **kwargs)
        try:
            for event in events:
                yield from mapper.feed(event)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # a caller that stopped reading aborts the turn; no agy is left behind
        _finish(response, mapper.message)


class AgyAsyncModel(_AgyModelBase, llm.AsyncModel):
    """The same model for llm's async API (`llm --async`, `llm.get_async_model`)."""

    class Options(AgyOptions):
        pass

    async def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.AsyncResponse,
        conversation: llm.AsyncConversation | None,
    ) -> AsyncGenerator[StreamEvent, None]:
        from agy_provider.hosts.turns import start_turn
        from agy_provider.live.provider import wait_for_turns
        from agy_provider.pi.host_input import HostTurn
        from agy_provider.pi.options import AbortSignal

        model, context, options, kwargs = self._turn(prompt, conversation)
        abort = AbortSignal()
        turn = HostTurn(model, context, options, abort=None)
        mapper = EventsToLlm()
        finished = False
        try:
            async for event in start_turn(turn, abort, **kwargs):
                for item in mapper.feed(event):
                    yield item
            finished = True
        finally:
            if not finished:
                abort.abort("llm stopped reading the response")
        message = mapper.message
        if message is None or message.stop_reason != "toolUse":
            # agy is stopped and the session saved after the final event: llm may close its
            # loop next. After `toolUse` agy waits for llm's chain to bring the results.
            await wait_for_turns()
        _finish(response, message)
