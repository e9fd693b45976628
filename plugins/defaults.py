"""Built-in decisions: which event source a turn uses, and the default answers to agy's prompts.

Hosts override any of these with their own plugins; firstresult hooks take the first opinion given.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agy_provider.hookspecs import hookimpl

if TYPE_CHECKING:
    from agy_provider.agy.step import PermissionRequest
    from agy_provider.agy.step import Question
    from agy_provider.agy.step import Step
    from agy_provider.contract.turn import TurnContext

__all__ = ["answer_question", "choose_event_source", "decide_permission"]

# "auto" prefers the RPC source (it can answer agy), then the database (both give thinking text),
# then agy's stdout (stream-json: text, tools and usage, no thinking). Whatever is chosen, the
# handover still turns to the stdout source when neither the database nor the chosen one reads.
_PREFERENCE = ("rpc", "sqlite", "stream-json")


@hookimpl(trylast=True)
def choose_event_source(turn: TurnContext, available: Sequence[str]) -> str | None:
    # A source asked for by name (`stream-json` included) is used when registered, else none.
    wanted = turn.event_source or "auto"
    if wanted != "auto":
        return wanted if wanted in available else None
    for name in _PREFERENCE:
        if name in available:
            return name
    return available[0] if available else None


@hookimpl(trylast=True)
def decide_permission(
    request: PermissionRequest | None, step: Step, turn: TurnContext
) -> bool | None:
    # Allow only when the user's config says permissions are skipped; otherwise deny, never hang.
    return turn.permissions == "skip"


@hookimpl(trylast=True)
def answer_question(
    questions: Sequence[Question], step: Step, turn: TurnContext
) -> Sequence[Mapping[str, object]] | None:
    # Nobody to ask: decline every question explicitly (an empty selection) so agy never hangs.
    return [{"question": q.question, "selectedOptionIds": []} for q in questions]
