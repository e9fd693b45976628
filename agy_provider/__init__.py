"""agy-provider: Google's Antigravity CLI (agy) as a streaming model provider.

The package root only re-exports, lazily: `import agy_provider` loads nothing else until a name is used.
"""

from __future__ import annotations

import importlib

# `typing` itself costs more than this whole module: mypy reads the constant by its name.
TYPE_CHECKING = False

__version__ = "0.1.0"

__all__ = [
    "AbortSignal",
    "AgyError",
    "AgyNotFoundError",
    "AssistantMessage",
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "Context",
    "Cost",
    "DatabaseError",
    "DecodeError",
    "DoneEvent",
    "ErrorEvent",
    "FramingError",
    "ImageContent",
    "IncompleteStreamError",
    "Model",
    "QuotaExceededError",
    "RpcError",
    "SimpleStreamOptions",
    "SourceError",
    "StartEvent",
    "StreamOptions",
    "TextContent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingContent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "Tool",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "ToolResultMessage",
    "TurnError",
    "Usage",
    "UsageError",
    "UserMessage",
    "__version__",
    "complete_simple",
    "hookimpl",
    "load_recording",
    "quota_error",
    "quota_of",
    "replay",
    "stream_simple",
]

if TYPE_CHECKING:
    from typing import Any

    from .agy.quota import quota_error, quota_of
    from .errors import (
        AgyError,
        AgyNotFoundError,
        DatabaseError,
        DecodeError,
        FramingError,
        IncompleteStreamError,
        QuotaExceededError,
        RpcError,
        SourceError,
        TurnError,
        UsageError,
    )
    from .hookspecs import hookimpl
    from .live.provider import complete_simple, stream_simple
    from .offline.replay import load_recording, replay
    from .pi.events import (
        AssistantMessageEvent,
        DoneEvent,
        ErrorEvent,
        StartEvent,
        TextDeltaEvent,
        TextEndEvent,
        TextStartEvent,
        ThinkingDeltaEvent,
        ThinkingEndEvent,
        ThinkingStartEvent,
        ToolCallDeltaEvent,
        ToolCallEndEvent,
        ToolCallStartEvent,
    )
    from .pi.options import AbortSignal, SimpleStreamOptions, StreamOptions
    from .pi.stream import AssistantMessageEventStream
    from .pi.types import (
        AssistantMessage,
        Context,
        Cost,
        ImageContent,
        Model,
        TextContent,
        ThinkingContent,
        Tool,
        ToolCall,
        ToolResultMessage,
        Usage,
        UserMessage,
    )

# Public name -> the private module that defines it. Nothing is imported until first use: the
# live path pulls in asyncio, psutil and httpx, replay pulls in sqlite3 and the decoders, and a
# host that only wants the types (or `agy-provider --help`) should pay for neither.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "AgyError",
            "AgyNotFoundError",
            "DatabaseError",
            "DecodeError",
            "FramingError",
            "IncompleteStreamError",
            "QuotaExceededError",
            "RpcError",
            "SourceError",
            "TurnError",
            "UsageError",
        ),
        "errors",
    ),
    **dict.fromkeys(("quota_error", "quota_of"), "agy.quota"),
    **dict.fromkeys(
        (
            "AssistantMessageEvent",
            "DoneEvent",
            "ErrorEvent",
            "StartEvent",
            "TextDeltaEvent",
            "TextEndEvent",
            "TextStartEvent",
            "ThinkingDeltaEvent",
            "ThinkingEndEvent",
            "ThinkingStartEvent",
            "ToolCallDeltaEvent",
            "ToolCallEndEvent",
            "ToolCallStartEvent",
        ),
        "pi.events",
    ),
    **dict.fromkeys(
        (
            "AssistantMessage",
            "Context",
            "Cost",
            "ImageContent",
            "Model",
            "TextContent",
            "ThinkingContent",
            "Tool",
            "ToolCall",
            "ToolResultMessage",
            "Usage",
            "UserMessage",
        ),
        "pi.types",
    ),
    **dict.fromkeys(("AbortSignal", "SimpleStreamOptions", "StreamOptions"), "pi.options"),
    **dict.fromkeys(("complete_simple", "stream_simple"), "live.provider"),
    **dict.fromkeys(("load_recording", "replay"), "offline.replay"),
    "AssistantMessageEventStream": "pi.stream",
    "hookimpl": "hookspecs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
