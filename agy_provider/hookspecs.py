"""The hooks agy-provider plugins implement: registration and decisions, never per-chunk streaming.

Collections are registered through a `register(...)` callback the core owns; "who decides" hooks are firstresult.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pluggy

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("agy_provider")
hookimpl = pluggy.HookimplMarker("agy_provider")


@hookspec
def register_event_sources(register: Callable[..., None]) -> None:
    """Register event sources: `register(name, factory, database=, language_server=)`."""


@hookspec(firstresult=True)
def choose_event_source(turn: Any, available: Sequence[str]) -> str | None:
    """Name the event source a turn uses, from `available`; None leaves it to the next plugin."""


@hookspec(firstresult=True)
def decide_permission(request: Any, step: Any, turn: Any) -> bool | None:
    """Allow (True) or deny (False) a permission request agy is waiting on; None: no opinion."""


@hookspec(firstresult=True)
def answer_question(
    questions: Sequence[Any], step: Any, turn: Any
) -> Sequence[Mapping[str, Any]] | None:
    """Answers to agy's questions as `{question, selectedOptionIds, writeInResponse?}`; None: no opinion."""


@hookspec
def register_host_tools(register: Callable[..., None]) -> None:
    """Register host tools the MCP bridge offers agy: `register(name, description, parameters)`."""


@hookspec(firstresult=True)
def invoke_host_tool(name: str, arguments: Mapping[str, Any], turn: Any) -> Any:
    """Run a host tool agy called through the MCP bridge; return its result, or None if not ours."""


@hookspec
def observe_event(event: Any, turn: Any) -> None:
    """See every pi event a turn produces, after it was produced (for logging and metrics)."""
