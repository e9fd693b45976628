"""`agy -p /usage --output-format json`: agy's own quota report, run and read.

Owns running the command (argv list, stdin /dev/null, bounded, no auto-update) and its result.

agy answers `/usage` itself, without a model call or a conversation (AGY-FORMATS §2.2, §2.3): one
`result` object with `num_turns: 0`, zero usage and `command{name, data}`. `data`'s shape is
unverified; `agy/quota.py`'s `parse_usage` reads it defensively. An agy that sends `/usage` to
the model instead (before 1.1.18) answers without `command`: that is said, not guessed at.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from typing import Any
from typing import Final

from agy_provider.agy.quota import UsageBucket
from agy_provider.agy.quota import parse_usage
from agy_provider.agy.quota import quota_from_text
from agy_provider.errors import DecodeError
from agy_provider.errors import SourceError
from agy_provider.errors import UsageError
from agy_provider.wire import jsontext

__all__ = ["USAGE_TIMEOUT", "QuotaReport", "read_quota_usage", "usage_argv"]

# agy answers /usage without a model call; its cold start (sign-in, eligibility) takes seconds.
USAGE_TIMEOUT: Final = 60.0
# What agy prints for /usage is a few kilobytes; more is not its answer (and is not kept).
_MAX_OUTPUT: Final = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaReport:
    """agy's `/usage`: its quota windows (`buckets`) and `data` as agy gave it."""

    buckets: tuple[UsageBucket, ...]
    data: Any = None
    observed_at: float = 0.0

    def table(self) -> str:
        """The windows for a person, one a line: `weekly  87% left, resets … (in 4d7h)`."""
        if not self.buckets:
            return "agy reported no quota windows\n"
        width = max(len(bucket.window) for bucket in self.buckets)
        return "".join(f"{b.window:<{width}}  {b.describe()}\n" for b in self.buckets)

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": [b.to_json() for b in self.buckets],
            "observedAt": self.observed_at,
            "data": self.data,
        }


def usage_argv(binary: str, *, timeout: float = USAGE_TIMEOUT) -> list[str]:
    """The argv of `agy -p /usage --output-format json --print-timeout …` for `binary`.

    Raises:
        UsageError: a binary that is empty, relative-looking like a flag, or holds a NUL.
    """
    if not binary or "\x00" in binary or binary.startswith("-"):
        raise UsageError(f"not an agy binary: {binary!r}")
    seconds = max(1, int(timeout))
    return [binary, "-p", "/usage", "--output-format", "json", "--print-timeout", f"{seconds}s"]


def _last_object(stdout: str) -> dict[str, Any] | None:
    """The last line of stdout that is a JSON object (notices and log lines can come first)."""
    for line in reversed(stdout[-_MAX_OUTPUT:].splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = jsontext.loads(line, "agy's /usage answer")
        except DecodeError:
            continue
        if isinstance(value, dict):
            return value
    try:  # `--output-format json` may pretty-print the one object over many lines
        value = jsontext.loads(stdout[-_MAX_OUTPUT:].strip() or "null", "agy's /usage answer")
    except DecodeError:
        return None
    return value if isinstance(value, dict) else None


def read_quota_usage(binary: str, *, timeout: float = USAGE_TIMEOUT) -> QuotaReport:
    """Run agy's `/usage` and return its quota windows.

    Raises:
        UsageError: `binary` cannot be an agy binary.
        QuotaExceededError: agy refused even this for quota (its words, when it resets).
        SourceError: agy could not be run, timed out, failed, or gave no usage data.
    """
    argv = usage_argv(binary, timeout=timeout)
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout + 5,  # agy's own --print-timeout first, ours as the backstop
            env={**os.environ, "AGY_CLI_DISABLE_AUTO_UPDATE": "1"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"`{binary} -p /usage` failed: {exc}") from exc
    now = time.time()
    answer = _last_object(done.stdout)
    said = (done.stderr or "").strip()[-2000:]
    if answer is None:
        raise SourceError(
            f"`{binary} -p /usage` gave no JSON answer (exit {done.returncode})"
            + (f": {said}" if said else "")
        )
    status = str(answer.get("status") or "")
    error = answer.get("error") if isinstance(answer.get("error"), str) else ""
    if status and status not in ("SUCCESS", "OK"):
        words = str(error or status)
        quota = quota_from_text(words, observed_at=now) or quota_from_text(said, observed_at=now)
        if quota is not None:
            raise quota.error()
        raise SourceError(f"agy refused /usage ({status}): {words}")
    command = answer.get("command")
    if not isinstance(command, dict) or "data" not in command:
        raise SourceError(
            f"`{binary}` answered /usage without usage data (no `command` object): this agy "
            "may not answer slash commands in print mode (agy ≥ 1.1.18 does)"
        )
    data = command.get("data")
    return QuotaReport(tuple(parse_usage(data, now=now)), data, now)
