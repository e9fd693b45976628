"""agy-sim's answers to the slash commands agy runs itself in print mode (`-p /usage`, `/config`).

Owns what `command.data` holds for each; the body shapes are unverified (no real capture).

agy answers `-p /usage` with no model call: `{"event":"command_result","command":{"name",
"data"}}` then a zero-token `result` with `num_turns: 0` (AGY-FORMATS §2.2, §2.3). No capture
shows `data`, so agy-sim answers `/usage` with a plausible shape — `{"buckets": [{"window",
"model", "remaining_fraction", "reset_time" (RFC 3339), "resets_in" (a Go duration)}]}` — that
`agy/quota.py`'s defensive parser reads along with others. A scenario with `quota_exhausted`
shows its weekly window at 0 remaining, resetting when agy's message says.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from agy_provider.sim.scenario import Scenario

__all__ = ["COMMANDS", "cli_command", "command_data"]

COMMANDS = frozenset({"usage", "config", "model", "effort"})
_RESETS = re.compile(r"Resets in ((?:[0-9]+[hms])+)")
_SLASH = re.compile(r"\s*/([a-z]+)(?:\s.*)?", re.DOTALL)


def cli_command(text: str) -> str | None:
    """`/usage` → "usage" when the whole text is a command agy answers itself (arguments
    allowed), else None: any other `/name args` is a skill the model runs."""
    match = _SLASH.fullmatch(text)
    return match.group(1) if match and match.group(1) in COMMANDS else None


def _go(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s"


def _seconds(duration: str) -> int:
    total = 0
    for amount, unit in re.findall(r"([0-9]+)([hms])", duration):
        total += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def command_data(name: str, scenario: Scenario, model: str, now: float) -> Any:
    """`command.data` for slash command `name` (one of `COMMANDS`) at epoch seconds `now`."""
    if name == "usage":
        windows: list[tuple[str, float, int]] = [("5h", 0.62, 3 * 3600 + 20 * 60)]
        windows.append(("weekly", 0.87, 4 * 86400 + 7 * 3600))
        if scenario.quota_exhausted:
            match = _RESETS.search(scenario.quota_exhausted)
            resets = _seconds(match.group(1)) if match else 3600
            windows[1] = ("weekly", 0.0, resets)
        buckets = []
        for window, remaining, resets_in in windows:
            at = datetime.datetime.fromtimestamp(int(now) + resets_in, datetime.UTC)
            buckets.append(
                {
                    "window": window,
                    "model": model,
                    "remaining_fraction": remaining,
                    "reset_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "resets_in": _go(resets_in),
                }
            )
        return {"buckets": buckets}
    if name in ("model", "effort"):
        return {"model": model}
    return {"model": model, "output_format": "stream-json"}
