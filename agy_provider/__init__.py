"""agy-provider: Google's Antigravity CLI (agy) as a streaming model provider.

The package root only re-exports, lazily: `import agy_provider` loads nothing else until a name is used.
"""

from __future__ import annotations

import importlib

# `typing` itself costs more than this whole module: mypy reads the constant by its name.
TYPE_CHECKING = False

__version__ = "0.1.0"

# The public names, by the private module that defines each. Nothing is imported until first use:
# the live path pulls in asyncio, psutil and httpx, replay pulls in sqlite3 and the decoders, and a
# host that only wants the types (or `agy-provider --help`) should pay for neither.
_EXPORTS = {
    "errors": """AgyError AgyNotFoundError DatabaseError DecodeError FramingError
        IncompleteStreamError QuotaExceededError RpcError SourceError TurnError UsageError""",
    "agy.quota": "quota_error quota_of",
    "pi.events": """AssistantMessageEvent DoneEvent ErrorEvent StartEvent TextDeltaEvent
        TextEndEvent TextStartEvent ThinkingDeltaEvent ThinkingEndEvent ThinkingStartEvent
        ToolCallDeltaEvent ToolCallEndEvent ToolCallStartEvent""",
    "pi.types": """AssistantMessage Context Cost ImageContent Model TextContent ThinkingContent
        Tool ToolCall ToolResultMessage Usage UserMessage""",
    "pi.options": "AbortSignal SimpleStreamOptions StreamOptions",
    "pi.stream": "AssistantMessageEventStream",
    "live.provider": "complete_simple stream_simple",
    "offline.replay": "load_recording replay",
    "hookspecs": "hookimpl",
}
_LAZY: dict[str, str] = {
    name: module for module, names in _EXPORTS.items() for name in names.split()
}

__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:
    # What mypy sees: the same names as `_EXPORTS`, each re-exported explicitly (`X as X`).
    from typing import Any

    from .agy.quota import quota_error as quota_error
    from .agy.quota import quota_of as quota_of
    from .errors import AgyError as AgyError
    from .errors import AgyNotFoundError as AgyNotFoundError
    from .errors import DatabaseError as DatabaseError
    from .errors import DecodeError as DecodeError
    from .errors import FramingError as FramingError
    from .errors import IncompleteStreamError as IncompleteStreamError
    from .errors import QuotaExceededError as QuotaExceededError
    from .errors import RpcError as RpcError
    from .errors import SourceError as SourceError
    from .errors import TurnError as TurnError
    from .errors import UsageError as UsageError
    from .hookspecs import hookimpl as hookimpl
    from .live.provider import complete_simple as complete_simple
    from .live.provider import stream_simple as stream_simple
    from .offline.replay import load_recording as load_recording
    from .offline.replay import replay as replay
    from .pi.events import AssistantMessageEvent as AssistantMessageEvent
    from .pi.events import DoneEvent as DoneEvent
    from .pi.events import ErrorEvent as ErrorEvent
    from .pi.events import StartEvent as StartEvent
    from .pi.events import TextDeltaEvent as TextDeltaEvent
    from .pi.events import TextEndEvent as TextEndEvent
    from .pi.events import TextStartEvent as TextStartEvent
    from .pi.events import ThinkingDeltaEvent as ThinkingDeltaEvent
    from .pi.events import ThinkingEndEvent as ThinkingEndEvent
    from .pi.events import ThinkingStartEvent as ThinkingStartEvent
    from .pi.events import ToolCallDeltaEvent as ToolCallDeltaEvent
    from .pi.events import ToolCallEndEvent as ToolCallEndEvent
    from .pi.events import ToolCallStartEvent as ToolCallStartEvent
    from .pi.options import AbortSignal as AbortSignal
    from .pi.options import SimpleStreamOptions as SimpleStreamOptions
    from .pi.options import StreamOptions as StreamOptions
    from .pi.stream import AssistantMessageEventStream as AssistantMessageEventStream
    from .pi.types import AssistantMessage as AssistantMessage
    from .pi.types import Context as Context
    from .pi.types import Cost as Cost
    from .pi.types import ImageContent as ImageContent
    from .pi.types import Model as Model
    from .pi.types import TextContent as TextContent
    from .pi.types import ThinkingContent as ThinkingContent
    from .pi.types import Tool as Tool
    from .pi.types import ToolCall as ToolCall
    from .pi.types import ToolResultMessage as ToolResultMessage
    from .pi.types import Usage as Usage
    from .pi.types import UserMessage as UserMessage


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
