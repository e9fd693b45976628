"""agy for pi-agent-core (`pi_agent_core`): a stream function and agy's models in its types.

pi-agent-core takes a provider as an `AgentOptions(stream_fn=...)` returning
`{"events": ..., "result": ...}` of its pydantic events; its `Agent.abort()` sets the
`cancel_event` it passes, which ends the agy turn `aborted`:

    agent = Agent(AgentOptions(stream_fn=stream_fn(), session_id="my-session"))
    agent.set_model(model("gemini-3.7-flash"))
    await agent.prompt("hi")
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import pi_agent_core

from agy_provider.hosts.turns import DEFAULT_MODEL_ID
from agy_provider.hosts.turns import PROVIDER_ID
from agy_provider.hosts.turns import agy_catalog
from agy_provider.hosts.turns import host_events
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent

__all__ = ["model", "models", "stream_fn"]

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
# Free-form JSON whose keys are the tool's or the host's own, never renamed.
_OPAQUE = frozenset({"arguments", "details"})


def model(model_id: str = DEFAULT_MODEL_ID) -> Any:
    """pi-agent-core's `Model` for an agy model (`default`: agy's configured model)."""
    return pi_agent_core.Model(api=PROVIDER_ID, provider=PROVIDER_ID, id=model_id)


def models(agy_bin: str | None = None) -> list[Any]:
    """Every model `agy models` lists, after `default`. Raises `SourceError` when agy cannot."""
    return [model(), *(model(m.id) for m in agy_catalog(agy_bin))]


def stream_fn(**turn_kwargs: Any) -> Callable[..., dict[str, Any]]:
    """pi-agent-core's `StreamFn` running agy turns; `turn_kwargs` go to `stream_simple`
    (`cwd`, `agy_bin`, …). Failures end in an `error` event, never an exception."""

    def stream(model: Any, context: Any, options: Any = None) -> dict[str, Any]:
        return _HostStream(host_events(model, context, options, **turn_kwargs)).as_result()

    return stream


class _HostStream:
    """Our events as pi-agent-core's, and the final message for its `result()`."""

    def __init__(self, events: AsyncIterator[AssistantMessageEvent]) -> None:
        self._source = events
        self._final: Any = None
        self._events = self._converted()

    def as_result(self) -> dict[str, Any]:
        result: Callable[[], Awaitable[Any]] = self._result
        return {"events": self._events, "result": result}

    async def _converted(self) -> AsyncIterator[Any]:
        async for event in self._source:
            converted = _event(event)
            if isinstance(event, DoneEvent):
                self._final = converted.message
            elif isinstance(event, ErrorEvent):
                self._final = converted.error
            yield converted

    async def _result(self) -> Any:
        async for _ in self._events:  # a caller that wants only the result
            pass
        if self._final is None:
            raise RuntimeError("the agy turn ended without a done or error event")
        return self._final


_EVENT_TYPES = {
    "start": "StreamStartEvent",
    "text_start": "StreamTextStartEvent",
    "text_delta": "StreamTextDeltaEvent",
    "text_end": "StreamTextEndEvent",
    "thinking_start": "StreamThinkingStartEvent",
    "thinking_delta": "StreamThinkingDeltaEvent",
    "thinking_end": "StreamThinkingEndEvent",
    "toolcall_start": "StreamToolCallStartEvent",
    "toolcall_delta": "StreamToolCallDeltaEvent",
    "toolcall_end": "StreamToolCallEndEvent",
    "done": "StreamDoneEvent",
    "error": "StreamErrorEvent",
}


def _event(event: AssistantMessageEvent) -> Any:
    """pi-agent-core's pydantic event for ours: pi's JSON with its snake_case field names."""
    cls = getattr(pi_agent_core, _EVENT_TYPES[event.type])
    return cls.model_validate(_snake(event.to_json()))


def _snake(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            _CAMEL.sub(lambda m: "_" + m.group(1).lower(), k): v if k in _OPAQUE else _snake(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value
