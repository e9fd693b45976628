"""The package root's public surface: exactly these names, each resolving, and a light import."""

from __future__ import annotations

import subprocess
import sys

import agy_provider

PUBLIC_NAMES = [
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


def test_all_is_pinned() -> None:
    # Adding or removing a public name is a decision: update this list on purpose.
    assert sorted(agy_provider.__all__) == PUBLIC_NAMES
    assert len(set(agy_provider.__all__)) == len(agy_provider.__all__)


def test_every_public_name_resolves() -> None:
    for name in agy_provider.__all__:
        assert getattr(agy_provider, name, None) is not None, name


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from agy_provider import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == PUBLIC_NAMES


def test_every_error_is_an_agy_error() -> None:
    errors = [getattr(agy_provider, n) for n in PUBLIC_NAMES if n.endswith("Error")]
    assert errors and all(issubclass(e, agy_provider.AgyError) for e in errors)


def test_import_stays_light() -> None:
    # A fresh interpreter: this test process may already have imported the simulator.
    code = (
        "import sys, agy_provider\n"
        "heavy = sorted(m for m in sys.modules if m == 'agy_provider.sim'"
        " or m.startswith('agy_provider.sim.'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
