"""agy's stream-json `result`, read once for the live path and for replay, and worded once.

Owns what a `result` object says (status, answer, error, usage, denied actions) and the words a
person reads for it; pure. agy's exit code and stderr are `verdict.py`'s.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final

from agy_provider.agy import streamjson_values as values
from agy_provider.agy.quota import QuotaInfo
from agy_provider.agy.quota import quota_from_text
from agy_provider.agy.step import StepUsage
from agy_provider.agy.step import TurnOutcome
from agy_provider.wire import jsontext

__all__ = [
    "CANCELED_STATUSES",
    "DENIAL_ADVICE",
    "OK_STATUSES",
    "AgyResult",
    "failed_outcome",
    "read_result",
    "resets_hint",
    "result_outcome",
]

OK_STATUSES: Final = frozenset({"SUCCESS", "OK"})
CANCELED_STATUSES: Final = frozenset({"CANCELED", "CANCELLED"})
DENIAL_ADVICE: Final = (
    "Allow it when agy asks, or run with permissions that allow it "
    "(agy --dangerously-skip-permissions, or agy's permission settings), then retry."
)
# agy 1.1.x cancels a print-mode turn whose action needs a permission, giving its reason only on
# stderr: without it, the words say where to look.
_NO_REASON: Final = (
    " (in print mode agy cancels a turn when an action needs a permission nobody granted; "
    "its reason is on stderr)"
)
# What else agy said, appended to a failure: a sentence or two, never a log.
_MAX_SAID_CHARS: Final = 500


@dataclasses.dataclass(frozen=True, slots=True)
class AgyResult:
    """What one stream-json `result` object says (AGY-FORMATS §2.1), each field read leniently.

    `status` is upper case ("" when agy gave none); `total_usage` is agy's running total for the
    conversation (1.1.18+), not the turn's share; `denied_actions` are readable names.
    """

    status: str = ""
    response: str = ""
    error: str = ""
    num_turns: int | None = None
    duration_seconds: float | None = None
    total_usage: StepUsage | None = None
    denied_actions: tuple[str, ...] = ()
    conversation_id: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status in OK_STATUSES

    @property
    def canceled(self) -> bool:
        return self.status in CANCELED_STATUSES


def read_result(body: Mapping[str, Any]) -> AgyResult:
    """A `result` object (the stream-json event's body, or `--output-format json`'s whole output)
    as an `AgyResult`; never raises, whatever the JSON holds."""
    num_turns = body.get("num_turns")
    return AgyResult(
        status=values.text(body.get("status")).upper(),
        response=values.text(body.get("response")),
        error=values.error_message(body.get("error")),
        num_turns=values.count(num_turns) if isinstance(num_turns, int | float) else None,
        duration_seconds=jsontext.finite_number(body.get("duration_seconds")),
        total_usage=values.stream_json_usage(body.get("usage")),
        denied_actions=values.denied_actions(body.get("denied_actions")),
        conversation_id=values.text(body.get("conversation_id")),
    )


def result_outcome(
    result: AgyResult,
    *,
    step_denials: Iterable[str] = (),
    answered: bool = True,
    reason: str = "",
    said: Sequence[str] = (),
    observed_at: float | None = None,
) -> TurnOutcome:
    """How the turn ended by agy's `result`, in the words the live path and replay both use.

    `step_denials` are denials the turn's own steps showed, failing a successful turn that has
    no answer (`answered` False); `reason` is agy's reason for a canceled turn (from stderr);
    `said` are other lines agy printed, appended to a failure when the error does not carry them.
    A quota refusal sets `quota` and says when it resets (`observed_at`: epoch seconds, now).
    """
    denied = [*result.denied_actions, *step_denials]
    what = ", ".join(dict.fromkeys(denied))
    if result.succeeded:
        if result.denied_actions or (denied and not answered):
            return TurnOutcome(
                ok=False, error=f"agy was denied permission to act: {what}. {DENIAL_ADVICE}"
            )
        return TurnOutcome()
    if result.canceled:
        message = f"agy ended the turn with {result.status}: {result.error or result.status}"
        if reason:
            message = f"{message}: {reason}"
        if what:
            message = f"{message} (denied: {what}). {DENIAL_ADVICE}"
        elif not reason:
            message += _NO_REASON
        return failed_outcome(message, observed_at)
    detail = result.error or result.status
    head = f"agy ended the turn with {result.status or 'no status'}"
    message = f"{head}: {detail}" if detail else head
    if what and not values.is_denial(message):
        message = f"{message} (denied: {what})"
    return failed_outcome(message + _also_said(said, message), observed_at)


def _also_said(lines: Sequence[str], message: str) -> str:
    """` — agy also said: …` for the lines the message does not already carry, else ""."""
    kept = [
        line.strip()
        for line in lines
        if line.strip() and line.strip().removeprefix("Error: ") not in message
    ]
    told = " ".join(kept)[-_MAX_SAID_CHARS:]
    return f" — agy also said: {told}" if told else ""


def failed_outcome(error: str, observed_at: float | None) -> TurnOutcome:
    """A failed turn with `error`; a quota refusal is typed (`quota`) and says when it resets."""
    quota = quota_from_text(error, observed_at=observed_at)
    return TurnOutcome(ok=False, error=error + resets_hint(quota), quota=quota)


def resets_hint(quota: QuotaInfo | None) -> str:
    """` (the quota resets at 23:40 UTC, in 3h20m)`, or "" when agy did not say when."""
    if quota is None or quota.resets_in is None:
        return ""
    seconds = int(quota.resets_in)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    span = f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
    if quota.resets_at is None:
        return f" (the quota resets in {span})"
    try:
        when = datetime.datetime.fromtimestamp(quota.resets_at, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f" (the quota resets in {span})"
    return f" (the quota resets at {when:%Y-%m-%d %H:%M} UTC, in {span})"
