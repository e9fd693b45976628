"""One tool run agy made itself, as a value: carried beside pi's thinking blocks and events.

pi has no such type (agy runs its own tools); pi's JSON leaves the value out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

__all__ = ["ToolRun"]


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool run agy made itself (agy-provider's, beside pi's fields; pi's JSON leaves it out).

    `name` the tool; `arguments` its call's; `argument` the key one as the thinking text shows
    it; `output` the result's lines as shown there (a diff for an edit; a failure, refusal or
    cancel says so on its first line); `exit_code` a command's, not repeated in `output`;
    `error` what failed, refused or cancelled it; `settled` once agy finished the step.
    """

    name: str
    argument: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    output: str = ""
    exit_code: int | None = None
    error: str | None = None
    settled: bool = False

    @property
    def failed(self) -> bool:
        """True when the tool failed, exited non-zero, was refused or was cancelled."""
        return self.error is not None or self.exit_code not in (None, 0)

    @property
    def result(self) -> str:
        """What came back, as a person reads it: a non-zero exit code first, then the output."""
        if self.exit_code:
            return f"exit {self.exit_code}\n{self.output}".rstrip("\n")
        return self.output
