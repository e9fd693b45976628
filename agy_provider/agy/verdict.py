"""agy's verdict on a live turn: its exit code, its `AGY_ERROR:` line, its `result`, its quota.

Owns turning how agy ended (code, stderr, stdout, stream-json `result`) into a `TurnOutcome`; pure.
The `result` is read and worded by `result.py`, as replay reads and words it.

agy 1.3.x exits 3 on a model or agent failure and prints one `AGY_ERROR: <what>` line (e.g.
`AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached … Resets in 3h20m`); a Go
panic prints `goroutine N [running]:` and frames (`\tpath/file.go:123 +0x45`) that no user should
read. `agy_error` finds agy's own sentence; `without_stack_trace` keeps the `panic:` sentence and
drops the goroutines and frames.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any
from typing import Final

from agy_provider.agy.result import failed_outcome
from agy_provider.agy.result import read_result
from agy_provider.agy.result import resets_hint
from agy_provider.agy.result import result_outcome
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
    read = read_result(result or {})
    if code:
        line = agy_error(stderr)
        if line:
            return failed_outcome(f"agy failed: {line}", observed_at)
        told = without_stack_trace(stderr)
        if read.status and not read.succeeded and read.error:
            if read.canceled:
                return result_outcome(read, reason=told[-2000:], observed_at=observed_at)
            return result_outcome(read, said=told.splitlines(), observed_at=observed_at)
        said = "\n".join(t for t in (told, stdout.strip()) if t)
        tail = said[-2000:] if said else "(nothing on stderr)"
        return failed_outcome(f"agy exited with code {code}: {tail}", observed_at)
    if not read.status:
        # agy printed no verdict of its own (no `result`, or one without a status): exit 0 is it.
        read = dataclasses.replace(read, status="SUCCESS")
    reason = without_stack_trace(stderr)[-2000:] if read.canceled else ""
    return result_outcome(read, reason=reason, observed_at=observed_at)
