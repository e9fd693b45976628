"""The package root's public surface: exactly these names, each resolving, and a light import."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from optional import need

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


# Every import the README and ARCHITECTURE.md show a user, by module: each must keep working
# under the same name wherever the code behind it moves.
DOCUMENTED_IMPORTS = {
    "agy_provider": set(PUBLIC_NAMES),
    "agy_provider.sync": {"complete", "iter_events"},
    "agy_provider.ask": {
        "AskResult",
        "ask_antigravity",
        "ask_antigravity_sync",
        "ask_tool",
        "run_ask_tool",
    },
    "agy_provider.hosts.pi_ai_python": {"provider"},
    "agy_provider.hosts.pi_agent_core": {"model", "models", "stream_fn"},
    "agy_provider.hosts.pi_ai_client": {"provider"},
    "agy_provider.hosts.pi_agents_py": {"model", "models", "register", "stream_fn", "unregister"},
}
IMPORT_LINE = re.compile(r"^\s*from (agy_provider[\w.]*) import ([\w, ]+)$", re.M)


# The pi ports import their host's package (extra `hosts`, installed by the README's first
# command): where it is missing, the port's test skips and says how to install it.
HOST_PACKAGES = {
    "agy_provider.hosts.pi_ai_python": ("pi_ai", "pi-ai-python"),
    "agy_provider.hosts.pi_agent_core": ("pi_agent_core", "pi-agent-core"),
    "agy_provider.hosts.pi_agents_py": ("pi_agents", "pi-agents-py"),
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED_IMPORTS))
def test_every_documented_import_resolves(module: str) -> None:
    if module in HOST_PACKAGES:
        need(*HOST_PACKAGES[module], "hosts")
    loaded = importlib.import_module(module)
    for name in DOCUMENTED_IMPORTS[module]:
        assert getattr(loaded, name, None) is not None, f"{module}.{name}"
        assert name in getattr(loaded, "__all__", ()), f"{name} is not in {module}.__all__"


def test_every_import_the_docs_show_is_pinned() -> None:
    # A new `from agy_provider… import …` in the docs is a promise: pin it above on purpose.
    root = Path(__file__).resolve().parents[1]
    shown = [
        (module, name.strip())
        for doc in ("README.md", "ARCHITECTURE.md")
        for module, names in IMPORT_LINE.findall((root / doc).read_text(encoding="utf-8"))
        for name in names.split(",")
    ]
    assert shown, "the README shows no import: the pattern above no longer reads it"
    unpinned = [f"{m}.{n}" for m, n in shown if n not in DOCUMENTED_IMPORTS.get(m, set())]
    assert unpinned == []


def test_what_mypy_sees_is_what_the_root_exports() -> None:
    """The root's `TYPE_CHECKING` re-exports name the same modules as its lazy table."""
    import ast

    tree = ast.parse(Path(agy_provider.__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    static = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
        if alias.asname == alias.name
    }
    assert static == agy_provider._LAZY
