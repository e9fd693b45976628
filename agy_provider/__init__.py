"""agy-provider: Google's Antigravity CLI (agy) as a streaming model provider.

The package root only re-exports; implementation modules are private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    AgyError,
    AgyNotFoundError,
    DatabaseError,
    DecodeError,
    FramingError,
    IncompleteStreamError,
    RpcError,
    SourceError,
    TurnError,
    UsageError,
)
from .events import (
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
from .hookspecs import hookimpl
from .replay import load_recording, replay
from .types import (
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
    "replay",
    "stream_simple",
]

if TYPE_CHECKING:
    from .options import AbortSignal, SimpleStreamOptions, StreamOptions
    from .provider import complete_simple, stream_simple
    from .stream import AssistantMessageEventStream

# The live path (asyncio, psutil, the runner) loads on first use, so `agy-provider replay` and
# other offline users start fast.
_LAZY = {
    "AbortSignal": "options",
    "AssistantMessageEventStream": "stream",
    "SimpleStreamOptions": "options",
    "StreamOptions": "options",
    "complete_simple": "provider",
    "stream_simple": "provider",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
