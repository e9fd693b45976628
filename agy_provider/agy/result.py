"""agy's stream-json `result`, read once for the live path and for replay, and worded once.

Owns what a `result` object says (status, answer, error, usage, denied actions) and the words a
person reads for it; pure. agy's exit code and stderr are `verdict.py`'s.
"""

from __future__ import annotations

import datetime

from agy_provider.agy.quota import QuotaInfo

__all__ = ["resets_hint"]


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
