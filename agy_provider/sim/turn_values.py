"""The simulator's turn values: `Clock`, `Conversation` (and its totals read back on resume),
`TurnResult` (and how a print-mode denial settles it), the running `SimTurn`, and the exceptions a
turn ends by.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from agy_provider.sim import descriptors as pb
from agy_provider.sim.image_views import NO_IMAGES
from agy_provider.sim.payloads import StepFactory
from agy_provider.sim.scenario import CatalogModel
from agy_provider.sim.scenario import ToolSpec
from agy_provider.sim.scenario import Usage
from agy_provider.sim.versions import AgyVersion
from agy_provider.sim.versions import sim_version
from agy_provider.sim.writer import ConversationWriter

__all__ = [
    "AutoDenied",
    "Canceled",
    "Clock",
    "Conversation",
    "PrintTimeout",
    "SimCrash",
    "SimTurn",
    "TurnFailed",
    "TurnResult",
    "add_usage",
    "settle_denial",
    "turn_totals",
    "usage_json",
]


def add_usage(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.input + b.input,
        a.thinking + b.thinking,
        a.response + b.response,
        a.cache_read + b.cache_read,
    )


class SimCrash(Exception):
    """The scenario crashes the process: exit with `exit_code` after printing `message`."""

    def __init__(self, exit_code: int, message: str) -> None:
        self.exit_code = exit_code
        self.message = message
        super().__init__(message)


class PrintTimeout(Exception):
    pass


class Canceled(Exception):
    pass


class AutoDenied(Exception):
    """Print mode denied a permission nobody granted: the turn ends the way the version does."""

    def __init__(self, message: str, tool: ToolSpec, action: str) -> None:
        self.tool = tool
        self.action = action
        super().__init__(message)


class TurnFailed(Exception):
    def __init__(self, message: str, exit_code: int, stderr: str = "") -> None:
        self.exit_code = exit_code
        self.stderr = stderr
        super().__init__(message)


class Clock:
    """Wall time scaled by `speed`; with `start` set, a virtual clock for reproducible records."""

    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        self.speed = max(speed, 1e-6)
        self._start = start
        self._virtual = 0.0

    def now(self) -> float:
        if self._start is None:
            return time.time()
        self._virtual += 0.000_137  # strictly increasing, like a real clock between two calls
        return self._start + self._virtual

    def real(self, nominal: float) -> float:
        """How long `nominal` scenario seconds really take."""
        return nominal / self.speed

    def advance(self, nominal: float) -> None:
        if self._start is not None:
            self._virtual += nominal


@dataclasses.dataclass
class Conversation:
    """One conversation database the simulator writes, its turn count and running totals.

    `usage_total` and `duration_total` are what agy ≥ 1.1.18 reports in every `result`: the whole
    conversation's, read back from the database when a conversation is resumed.
    """

    id: str
    writer: ConversationWriter
    turns: int = 0
    prompts: list[str] = dataclasses.field(default_factory=list)
    usage_total: Usage = dataclasses.field(default_factory=Usage)
    duration_total: float = 0.0

    @property
    def trajectory_id(self) -> str:
        return self.writer.trajectory_id


def usage_json(u: Usage) -> dict[str, int]:
    """stream-json usage: `total_tokens` = input + output (cached tokens are not added)."""
    return {
        "input_tokens": u.input,
        "output_tokens": u.output,
        "thinking_tokens": u.thinking,
        "cache_read_tokens": u.cache_read,
        "total_tokens": u.input + u.output,
    }


@dataclasses.dataclass
class TurnResult:
    """How a turn ended, in stream-json `result` terms.

    `usage` and `duration_seconds` are what the version reports: the turn's own (agy ≤ 1.1.17)
    or the conversation's running totals (1.1.18+). `stderr` is what agy prints there (the
    reason of a 1.1.18 auto-denial); `denied_actions` the 1.2.x list.
    """

    conversation_id: str
    status: str = "SUCCESS"
    response: str = ""
    error: str = ""
    duration_seconds: float = 0.0
    usage: Usage = dataclasses.field(default_factory=Usage)
    exit_code: int = 0
    num_turns: int = 1
    denied_actions: list[dict[str, str]] = dataclasses.field(default_factory=list)
    stderr: str = ""
    version: AgyVersion = dataclasses.field(default_factory=sim_version)

    def usage_json(self) -> dict[str, int]:
        return usage_json(self.usage)

    def to_json(self) -> dict[str, Any]:
        """The `result` object (and the whole `--output-format json` output) of this version."""
        body: dict[str, Any] = {
            "conversation_id": self.conversation_id,
            "status": self.status,
            "response": self.response,
        }
        if self.error or not self.version.new_stream_shapes:
            body["error"] = self.error  # 1.1.18+ omits it unless the turn failed
        body["duration_seconds"] = round(self.duration_seconds, 6)
        body["num_turns"] = self.num_turns
        body["usage"] = self.usage_json()
        if self.denied_actions:
            body["denied_actions"] = list(self.denied_actions)
        return body


def settle_denial(version: AgyVersion, result: TurnResult, denied: AutoDenied) -> None:
    """End a turn whose permission print mode denied, as the imitated version does (§2.2)."""
    tool = denied.tool
    target = str(tool.args.get("CommandLine", tool.args.get("AbsolutePath", tool.name)))
    shape = version.denial
    if shape == "error":
        result.status, result.error, result.exit_code = "ERROR", str(denied), 1
    elif shape == "canceled":
        result.status = "CANCELED"
        result.stderr = (
            f'Error: permission for {denied.action} "{target}" was auto-denied: print mode '
            "cannot ask (run with --dangerously-skip-permissions to allow it)"
        )
    else:
        display = "".join(part.capitalize() for part in tool.name.split("_"))
        result.denied_actions = [{"action": denied.action, "display_name": display}]


@dataclasses.dataclass
class SimTurn:
    conversation: Conversation
    factory: StepFactory
    model: CatalogModel
    deadline: float | None
    usage: Usage = dataclasses.field(default_factory=Usage)
    response: str = ""
    denied: str = ""
    title_usage: Usage = dataclasses.field(default_factory=Usage)
    current: tuple[int, Any] | None = None
    threads: list[threading.Thread] = dataclasses.field(default_factory=list)
    mcp_result: str | None = None  # the turn's last MCP tool result, for `{mcp_result}` in text
    viewed_images: str = NO_IMAGES  # what the turn's image views found, for `{viewed_images}`


def turn_totals(writer: ConversationWriter) -> tuple[int, Usage, float]:
    """Turns, usage and duration so far, read back from the database (a resumed conversation).

    Usage is every model call recorded on a step (5.9, the checkpoint's title call
    included); a turn's duration runs from its user step to the last moment it stamped.
    """
    import sqlite3

    user_type = pb.STEP_TYPE["CORTEX_STEP_TYPE_USER_INPUT"]
    turns, total, duration = 0, Usage(), 0.0
    started: float | None = None
    latest = 0.0
    with sqlite3.connect(f"file:{writer.path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT step_type, step_payload FROM steps ORDER BY idx").fetchall()
    for step_type, payload in rows:
        step = pb.Step()
        step.ParseFromString(payload or b"")
        meta = step.metadata
        stamps = [
            t.seconds + t.nanos / 1e9
            for t in (meta.created_at, meta.completed_at)
            if t.seconds or t.nanos
        ]
        if step_type == user_type:
            if started is not None:
                duration += max(0.0, latest - started)
            turns += 1
            started = latest = stamps[0] if stamps else latest
        if stamps:
            latest = max([latest, *stamps])
        if meta.HasField("model_usage"):
            u = meta.model_usage
            total = Usage(
                total.input + u.input_tokens,
                total.thinking + u.thinking_output_tokens,
                total.response + (u.output_tokens - u.thinking_output_tokens),
                total.cache_read + u.cache_read_tokens,
            )
    if started is not None:
        duration += max(0.0, latest - started)
    return turns, total, duration
