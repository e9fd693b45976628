"""How a turn ends: the one rule live turns and replay share (`done`, or `error` and why).

Pure: takes what the source said (`TurnOutcome`) and what the steps showed, returns the ending.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from agy_provider.agy.step import TurnOutcome

__all__ = ["CANCELLED", "EMPTY_ANSWER", "Ending", "decide_ending"]

EMPTY_ANSWER = (
    "agy finished without an answer (no text). This happens when a permission was denied in "
    "print mode or --print-timeout expired; try permissions=skip (AGY_PERMISSIONS=skip) or the "
    "rpc event source"
)

CANCELLED = "agy cancelled the turn before it answered (its last step was cancelled)."


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    """`reason` is pi's stop reason; `error` is empty unless the turn failed or was aborted."""

    reason: Literal["stop", "length", "error", "aborted"]
    error: str = ""


def decide_ending(
    outcome: TurnOutcome,
    *,
    failure: str | None,
    answered: bool,
    truncated: bool = False,
    cancelled: bool = False,
) -> Ending:
    """The turn's ending, in order of precedence:

    aborted by the host; failed by the source (agy's exit, stream-json `result`, a deadline);
    an error step or failed planner as the steps' last word (`failure`); no answer text at all
    (`answered` false: an empty answer is agy failing quietly, AGY-FORMATS §2 — said as a
    cancel when the turn's last step was cancelled); else `stop` (`length` when the model hit
    its output limit).
    """
    if outcome.aborted:
        return Ending("aborted", outcome.error or "The turn was aborted.")
    if not outcome.ok:
        return Ending("error", outcome.error or "agy ended the turn with an error.")
    if failure:
        return Ending("error", failure)
    if not answered:
        return Ending("error", CANCELLED if cancelled else EMPTY_ANSWER)
    return Ending("length" if truncated else "stop")
