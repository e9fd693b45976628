"""agy for pi-agents-py (`pi_agents`): its API registry entry, a stream function, agy's models.

pi-agents-py routes `pi_agents.ai.stream.stream_simple` by `model.api`; `register()` adds api
`agy`. Its `Agent` neither forwards its `session_id` to the stream function nor gives it a signal
(`Agent.abort()` sets nothing, 0.58.3), so an agent continues one agy conversation only through
`stream_fn(session_id=...)`, and cannot abort a turn:

    register()
    agent = Agent({"initial_state": {"model": model("gemini-3.7-flash")},
                   "stream_fn": stream_fn(session_id="my-session")})
    await agent.prompt("hi")
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from pi_agents.ai import types as pi
from pi_agents.ai.api_registry import register_api_provider
from pi_agents.ai.api_registry import unregister_api_providers
from pi_agents.ai.utils.event_stream import AssistantMessageEventStream

from agy_provider.hosts.turns import DEFAULT_MODEL_ID
from agy_provider.hosts.turns import PROVIDER_ID
from agy_provider.hosts.turns import agy_catalog
from agy_provider.hosts.turns import host_events
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall

__all__ = ["SOURCE_ID", "model", "models", "register", "stream_fn", "unregister"]

# Who registered api `agy` in pi-agents-py's registry, so `unregister()` removes only ours.
SOURCE_ID = "agy_provider"


def model(model_id: str = DEFAULT_MODEL_ID) -> Any:
    """pi-agents-py's `Model` for an agy model (`default`: agy's configured model)."""
    ours = agy_model(model_id)
    return pi.Model(
        id=ours.id,
        name=ours.name,
        api=ours.api,
        provider=ours.provider,
        reasoning=ours.reasoning,
        input=["text"],
        context_window=ours.context_window,
        max_tokens=ours.max_tokens,
    )


def models(agy_bin: str | None = None) -> list[Any]:
    """Every model `agy models` lists, after `default`. Raises `SourceError` when agy cannot."""
    listed = [model()]
    for found in agy_catalog(agy_bin):
        listed.append(
            dataclasses.replace(model(found.id), name=found.name, reasoning=found.reasoning)
        )
    return listed


def register(**turn_kwargs: Any) -> None:
    """Serve api `agy` in pi-agents-py's registry (`turn_kwargs` go to every turn)."""
    run = stream_fn(**turn_kwargs)
    register_api_provider(PROVIDER_ID, run, run, source_id=SOURCE_ID)


def unregister() -> None:
    """Remove what `register()` added."""
    unregister_api_providers(SOURCE_ID)


def stream_fn(session_id: str | None = None, **turn_kwargs: Any) -> Callable[..., Any]:
    """A pi-agents-py stream function running agy turns; `session_id` applies when the caller's
    options name none. Failures end in an `error` event, never an exception."""

    def stream(model: Any, context: Any, options: Any = None) -> AssistantMessageEventStream:
        if session_id is not None and getattr(options, "session_id", None) is None:
            options = (
                dataclasses.replace(options, session_id=session_id)
                if dataclasses.is_dataclass(options) and not isinstance(options, type)
                else {**(options or {}), "session_id": session_id}
            )
        out = AssistantMessageEventStream()

        async def relay() -> None:
            try:
                async for event in host_events(model, context, options, **turn_kwargs):
                    out.push(_event(event))
            finally:
                out.end()  # its iteration stops only at end(), not at done/error

        _keep(asyncio.get_running_loop().create_task(relay()))
        return out

    return stream


def _event(event: AssistantMessageEvent) -> dict[str, Any]:
    """pi-agents-py's event: pi's JSON, its messages as pi-agents-py's data classes."""
    out = event.to_json()
    for key in ("partial", "message", "error"):
        message = getattr(event, key, None)
        if isinstance(message, AssistantMessage):
            out[key] = _message(message)
    return out


def _message(message: AssistantMessage) -> Any:
    content: list[Any] = []
    for block in message.content:
        if isinstance(block, TextContent):
            content.append(pi.TextContent(text=block.text, text_signature=block.text_signature))
        elif isinstance(block, ThinkingContent):
            content.append(
                pi.ThinkingContent(
                    thinking=block.thinking,
                    thinking_signature=block.thinking_signature,
                    redacted=block.redacted,
                )
            )
        elif isinstance(block, ToolCall):
            content.append(
                pi.ToolCall(id=block.id, name=block.name, arguments=dict(block.arguments))
            )
    usage = message.usage
    return pi.AssistantMessage(
        content=content,
        api=message.api,
        provider=message.provider,
        model=message.model,
        usage=pi.Usage(
            input=usage.input,
            output=usage.output,
            cache_read=usage.cache_read,
            cache_write=usage.cache_write,
            total_tokens=usage.total_tokens,
        ),
        stop_reason=message.stop_reason,
        error_message=message.error_message,
        timestamp=message.timestamp,
    )


_relays: set[asyncio.Task[None]] = set()


def _keep(task: asyncio.Task[None]) -> None:
    _relays.add(task)
    task.add_done_callback(_relays.discard)
