"""Which agy the simulator imitates (`AGY_SIM_VERSION`), and what that version's output looks like.

Owns the version → shape table (AGY-FORMATS §2, §2.1–§2.3); the rest of the simulator asks it.

The 1.3.x shapes (§2.3) come from other projects' runs of agy and its headless docs, not from a
capture here: treat them as unverified, and each as its own switch below.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Literal
from typing import overload

from agy_provider.errors import UsageError

__all__ = ["LATEST", "NEWEST", "OLDEST", "AgyVersion", "sim_version"]

# The newest agy whose output is verified in the field guide, and the oldest we imitate at all.
# NEWEST stays the default imitated: 1.3.3 (`AGY_SIM_VERSION=1.3.3`, the newest seen, LATEST) is
# known only from other projects' reports (AGY-FORMATS §2.3).
NEWEST = "1.2.13"
LATEST = "1.3.3"
OLDEST = "1.0.10"
_VERSION = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,4})")

Denial = Literal["error", "canceled", "denied_actions"]


class _Since:
    """A shape agy has from `version` on: on an `AgyVersion`, whether that version has it."""

    def __init__(self, version: str, doc: str) -> None:
        self.version = version
        self.__doc__ = doc

    @overload
    def __get__(self, instance: None, owner: type[AgyVersion]) -> _Since: ...

    @overload
    def __get__(self, instance: AgyVersion, owner: type[AgyVersion]) -> bool: ...

    def __get__(self, instance: AgyVersion | None, owner: type[AgyVersion]) -> _Since | bool:
        return self if instance is None else instance.at_least(self.version)


@dataclasses.dataclass(frozen=True, slots=True)
class AgyVersion:
    """One agy version and the output shapes it has. Compare with `at_least("1.1.18")`."""

    text: str
    number: tuple[int, int, int]

    @classmethod
    def parse(cls, text: str) -> AgyVersion:
        """`1.2.13` → AgyVersion; raises `UsageError` for anything else or a version below OLDEST."""
        match = _VERSION.fullmatch(text.strip().removeprefix("v"))
        if match is None:
            raise UsageError(f"AGY_SIM_VERSION must look like {NEWEST}, not {text!r}")
        number = (int(match[1]), int(match[2]), int(match[3]))
        version = cls(".".join(map(str, number)), number)
        if not version.at_least(OLDEST):
            raise UsageError(f"agy-sim imitates agy {OLDEST} and later, not {text}")
        return version

    def at_least(self, other: str) -> bool:
        major, minor, patch = (int(part) for part in other.split("."))
        return self.number >= (major, minor, patch)

    # -- the shapes -------------------------------------------------------------------------

    # Each of these is true from the version it names on.
    has_output_formats = _Since("1.1.8", "`--output-format text|json|stream-json` exists (1.1.8).")
    new_stream_shapes = _Since(
        "1.1.18",
        """1.1.18+: tool outcomes in `tool_info`, running-total `result` usage and duration, no
        `"error": ""` on success, the checkpoint's own model call (title) on its update.""",
    )
    stream_input_needs_stream_output = _Since(
        "1.2.0", "1.2.x refuses `--input-format stream-json` without `--output-format stream-json`."
    )
    forks_unknown_conversation = _Since(
        "1.2.0",
        """1.2+: `--conversation <id>` without a database starts a new conversation, saying only
        `warning: conversation "<id>" not found` on stderr; older builds refuse (exit 1).""",
    )
    init_at_start = _Since(
        "1.3.0", "1.3.x prints `init` when the process starts, before reading any input (§2.3)."
    )
    finish_steps = _Since(
        "1.3.0", "1.3.x ends the agent's loop with a FINISH step (type 2; stream-json `finish`)."
    )
    agy_error_exit = _Since(
        "1.3.0", "1.3.x exits 3 on a model or agent failure, with an `AGY_ERROR: …` line on stderr."
    )
    init_always_has_model = _Since(
        "1.3.2", "From 1.3.2 `init.model` is always there, not only when `--model` is given (§2.3)."
    )

    @property
    def denial(self) -> Denial:
        """How a print-mode turn ends when a permission is auto-denied (AGY-FORMATS §2.2).

        `error`: 1.1.17, result ERROR with the permission message. `canceled`: 1.1.18–1.1.x,
        result CANCELED, exit 0, the reason only on stderr. `denied_actions`: 1.2.x, result
        SUCCESS with an empty response and `denied_actions`.
        """
        if self.at_least("1.2.0"):
            return "denied_actions"
        return "canceled" if self.new_stream_shapes else "error"

    @property
    def skip_permission_mode(self) -> str:
        """`init.permission_mode` under `--dangerously-skip-permissions`."""
        return "always-proceed" if self.new_stream_shapes else "bypass-permissions"

    @property
    def models_format(self) -> Literal["names", "slugs", "tabbed"]:
        """`agy models`: display names before 1.1.5, bare slugs before 1.1.25, then `slug\\tName`."""
        if not self.at_least("1.1.5"):
            return "names"
        return "tabbed" if self.at_least("1.1.25") else "slugs"

    @property
    def efforts(self) -> tuple[str, ...]:
        return (
            ("low", "medium", "high", "max")
            if self.at_least("1.2.0")
            else ("low", "medium", "high")
        )

    @property
    def answers_slash_commands(self) -> bool:
        """`-p /usage` (and `/config`, `/model`) answers with a `command{name, data}` object and
        `num_turns: 0`, after a `command_result` event in stream-json (§2.2: 1.1.18–1.2.13 real
        runs; §2.3: 1.3.x). Older builds send the text to the model like any prompt."""
        return self.new_stream_shapes

    @property
    def default_print_timeout(self) -> str:
        """1.2.x waits forever by default; 1.1.x gives up after five minutes."""
        return "0s" if self.at_least("1.2.0") else "5m0s"


def sim_version(environ: Mapping[str, str] | None = None) -> AgyVersion:
    """The version named by `AGY_SIM_VERSION`, else NEWEST. Raises `UsageError` for a bad value."""
    env = os.environ if environ is None else environ
    return AgyVersion.parse(env.get("AGY_SIM_VERSION") or NEWEST)
