"""agy's verdict on a live turn: its exit code, its `AGY_ERROR:` line, its `result`, its quota.

Owns turning how agy ended (code, stderr, stdout, stream-json `result`) into a `TurnOutcome`; pure.

agy 1.3.x exits 3 on a model or agent failure and prints one `AGY_ERROR: <what>` line (e.g.
`AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached … Resets in 3h20m`); a Go
panic prints `goroutine N [running]:` and frames (`\tpath/file.go:123 +0x45`) that no user should
read. `agy_error` finds agy's own sentence; `without_stack_trace` keeps the `panic:` sentence and
drops the goroutines and frames.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from agy_provider.agy.quota import quota_from_text
from agy_provider.agy.result import resets_hint
from agy_provider.agy.step import TurnOutcome

__all__ = ["AGY_ERROR_PREFIX", "agy_error", "exit_verdict", "resets_hint", "without_stack_trace"]

AGY_ERROR_PREFIX: Final = "AGY_ERROR:"
# One error line agy writes is a sentence or two; a longer one is cut (the turn's message must
# stay readable, and a hostile stderr must not become a megabyte error event).
_MAX_LINE_CHARS: Final = 2000
_GO_TRACE: Final = re.compile(
    r"^(goroutine \d+ \[|\s+\S+\.go:\d+|[\w./*()-]+\(.*\)$|\[signal |exit status \d+$)"
)


def agy_error(stderr: str) -> str:
    """The text of agy's last `AGY_ERROR:` line (after the prefix), or "" when there is none."""
    found = ""
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith(AGY_ERROR_PREFIX):
            found = line[len(AGY_ERROR_PREFIX) :].strip()[:_MAX_LINE_CHARS]
    return found


def without_stack_trace(text: str) -> str:
    """`text` with Go panic and stack-trace lines removed (goroutine headers, frames)."""
    kept = [line for line in text.splitlines() if not _GO_TRACE.match(line)]
    return "\n".join(kept).strip()


def _also_said(stderr: str, message: str) -> str:
    """` — agy also said: …` for stderr lines the message does not already carry, else ""."""
    lines = [
        line.strip()
        for line in without_stack_trace(stderr).splitlines()
        if line.strip() and line.strip().removeprefix("Error: ") not in message
    ]
    said = " ".join(lines)[-500:]
    return f" — agy also said: {said}" if said else ""


def _with_quota(error: str, observed_at: float | None, *sources: str) -> TurnOutcome:
    quota = next(
        (q for text in (error, *sources) if (q := quota_from_text(text, observed_at=observed_at))),
        None,
    )
    return TurnOutcome(ok=False, error=error + resets_hint(quota), quota=quota)


def exit_verdict(
    code: int | None,
    *,
    stderr: str,
    stdout: str,
    result: Mapping[str, Any] | None,
    observed_at: float | None = None,
) -> TurnOutcome:
    """How agy ended the turn, in agy's own words (a `TurnOutcome`; `ok` when it succeeded).

    A failing exit with an `AGY_ERROR:` line (agy 1.3.x, exit 3) is that line; else a `result`
    with a failing status is its `error`; else the exit code with what agy printed (Go stack
    traces removed). A quota refusal anywhere in those words sets `quota` and says when it
    resets. Denied actions on a SUCCESS result fail the turn, naming them. `observed_at` (epoch
    seconds: now) turns agy's `Resets in …` into a reset time.
    """
    stderr = stderr.strip()
    result = result or {}
    status = str(result.get("status") or "")
    raw_error = result.get("error")
    result_error = raw_error if isinstance(raw_error, str) else ""
    if code:
        line = agy_error(stderr)
        if line:
            return _with_quota(f"agy failed: {line}", observed_at)
        if status and status not in ("SUCCESS", "OK") and result_error:
            message = f"agy ended the turn with {status}: {result_error}"
            return _with_quota(message + _also_said(stderr, message), observed_at)
        said = "\n".join(t for t in (without_stack_trace(stderr), stdout.strip()) if t)
        tail = said[-2000:] if said else "(nothing on stderr)"
        return _with_quota(f"agy exited with code {code}: {tail}", observed_at)
    if status and status not in ("SUCCESS", "OK"):
        detail = result_error or status
        if status == "CANCELED" and stderr:
            detail = f"{detail}: {without_stack_trace(stderr)[-2000:]}"
        return _with_quota(f"agy ended the turn with {status}: {detail}", observed_at)
    denied = result.get("denied_actions")
    if isinstance(denied, list) and denied:
        names = ", ".join(
            str(d.get("display_name") or d.get("action") or d) if isinstance(d, dict) else str(d)
            for d in denied
        )
        return TurnOutcome(ok=False, error=f"agy was denied permission to act: {names}")
    return TurnOutcome()
