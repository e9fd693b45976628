"""The hooks agy-provider plugins implement: registration and decisions, never per-chunk streaming.

Collections are registered through a `register(...)` callback the core owns; "who decides" hooks are firstresult.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import pluggy

if TYPE_CHECKING:  # the types only: importing hookspecs stays cheap
    from agy_provider.agy.step import PermissionRequest
    from agy_provider.agy.step import Question
    from agy_provider.agy.step import Step
    from agy_provider.contract.host_tools import RegisterHostTool
    from agy_provider.contract.sources import RegisterEventSource
    from agy_provider.contract.turn import TurnContext
    from agy_provider.pi.events import AssistantMessageEvent

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("agy_provider")
hookimpl = pluggy.HookimplMarker("agy_provider")


@hookspec
def register_event_sources(register: RegisterEventSource) -> None:
    """Register event sources: `register(name, factory, database=, language_server=, stdout=)`;
    `factory(turn)` returns the source."""


@hookspec(firstresult=True)
def choose_event_source(turn: TurnContext, available: Sequence[str]) -> str | None:
    """Name the event source a turn uses, from `available`; None leaves it to the next plugin."""


@hookspec(firstresult=True)
def decide_permission(
    request: PermissionRequest | None, step: Step, turn: TurnContext
) -> bool | None:
    """Allow (True) or deny (False) a permission request agy is waiting on (`request` None: agy
    did not say what it asks); None: no opinion."""


@hookspec(firstresult=True)
def answer_question(
    questions: Sequence[Question], step: Step, turn: TurnContext
) -> Sequence[Mapping[str, object]] | None:
    """Answers to agy's questions as `{question, selectedOptionIds, writeInResponse?}`; None: no opinion."""


@hookspec
def register_host_tools(register: RegisterHostTool) -> None:
    """Register host tools the MCP bridge offers agy: `register(name, description, parameters)`."""


@hookspec(firstresult=True)
def invoke_host_tool(name: str, arguments: Mapping[str, Any], turn: TurnContext) -> object:
    """Run a host tool agy called through the MCP bridge: text, a `HostToolResult` or a JSON value;
    None if not ours."""


@hookspec
def observe_event(event: AssistantMessageEvent, turn: TurnContext) -> None:
    """See every pi event a turn produces, after it was produced (for logging and metrics)."""
