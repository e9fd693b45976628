"""The one normalized, frozen Step every source decodes to, and the tables that give it meaning.

Row, RPC JSON and stream-json decoders all produce `Step`; the assembler consumes only `Step`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.quota import QuotaInfo

__all__ = [
    "STATUS_BY_NUMBER",
    "STATUS_TRANSITIONS",
    "TERMINAL_STATUSES",
    "Interaction",
    "InteractionKind",
    "PermissionRequest",
    "Question",
    "QuestionOption",
    "Step",
    "StepKind",
    "StepStatus",
    "StepUsage",
    "ToolCall",
    "ToolResult",
    "TurnOutcome",
]


class StepKind(enum.StrEnum):
    """What a step is, decided from its content (AGY-FORMATS §3.3)."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    ERROR = "error"
    CHECKPOINT = "checkpoint"
    SYSTEM = "system"
    HISTORY = "history"
    UNKNOWN = "unknown"


class StepStatus(enum.StrEnum):
    """agy's CortexStepStatus, by name (AGY-FORMATS §3.4)."""

    UNSPECIFIED = "unspecified"
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    INVALID = "invalid"
    CLEARED = "cleared"
    CANCELED = "canceled"
    ERROR = "error"
    GENERATING = "generating"
    WAITING = "waiting"
    QUEUED = "queued"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


STATUS_BY_NUMBER: Mapping[int, StepStatus] = {
    0: StepStatus.UNSPECIFIED,
    1: StepStatus.PENDING,
    2: StepStatus.RUNNING,
    3: StepStatus.DONE,
    4: StepStatus.INVALID,
    5: StepStatus.CLEARED,
    6: StepStatus.CANCELED,
    7: StepStatus.ERROR,
    8: StepStatus.GENERATING,
    9: StepStatus.WAITING,
    11: StepStatus.QUEUED,
    12: StepStatus.INTERRUPTED,
}

TERMINAL_STATUSES: frozenset[StepStatus] = frozenset(
    {
        StepStatus.DONE,
        StepStatus.INVALID,
        StepStatus.CLEARED,
        StepStatus.CANCELED,
        StepStatus.ERROR,
        StepStatus.INTERRUPTED,
    }
)

# The moves agy makes with one step's status, as its recorded transitions (metadata 5.26.1) show:
# real captures have unspecified→pending/generating/done, pending→running/waiting,
# running→waiting/done, waiting→running/error, generating→done. A step written straight into
# ERROR (a model call that fails before generating) is what agy-sim does; unverified on real agy.
# tests/test_status_transitions.py holds the real captures and the simulator to this table.
# Readers must not *rely* on it: a torn read or a skipped poll can show any later state.
STATUS_TRANSITIONS: Mapping[StepStatus, frozenset[StepStatus]] = {
    StepStatus.UNSPECIFIED: frozenset(
        {
            StepStatus.PENDING,
            StepStatus.QUEUED,
            StepStatus.RUNNING,
            StepStatus.GENERATING,
            StepStatus.DONE,
            StepStatus.ERROR,
        }
    ),
    StepStatus.QUEUED: frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELED}),
    StepStatus.PENDING: frozenset(
        {
            StepStatus.RUNNING,
            StepStatus.GENERATING,
            StepStatus.WAITING,
            StepStatus.DONE,
            StepStatus.ERROR,
            StepStatus.CANCELED,
        }
    ),
    StepStatus.RUNNING: frozenset(
        {
            StepStatus.GENERATING,
            StepStatus.WAITING,
            StepStatus.DONE,
            StepStatus.ERROR,
            StepStatus.CANCELED,
            StepStatus.INTERRUPTED,
        }
    ),
    StepStatus.GENERATING: frozenset(
        {StepStatus.DONE, StepStatus.ERROR, StepStatus.CANCELED, StepStatus.INTERRUPTED}
    ),
    StepStatus.WAITING: frozenset(
        {StepStatus.RUNNING, StepStatus.DONE, StepStatus.ERROR, StepStatus.CANCELED}
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call agy made: `arguments` is the parsed JSON object (empty when unknown)."""

    id: str
    name: str
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool run produced. `exit_code` only for commands."""

    output: str = ""
    exit_code: int | None = None
    is_error: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class StepUsage:
    """One model call's tokens: `input` excludes cache reads; `output` includes thinking."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def __add__(self, other: StepUsage) -> StepUsage:
        return StepUsage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


class InteractionKind(enum.StrEnum):
    PERMISSION = "permission"
    QUESTION = "question"
    OTHER = "other"


@dataclasses.dataclass(frozen=True, slots=True)
class PermissionRequest:
    action: str = ""
    target: str = ""
    description: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class QuestionOption:
    id: str
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Question:
    question: str
    options: tuple[QuestionOption, ...] = ()
    multi_select: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Interaction:
    """What a WAITING step asks of the user. `name` is agy's interaction field for OTHER kinds."""

    kind: InteractionKind
    permission: PermissionRequest | None = None
    questions: tuple[Question, ...] = ()
    name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step of a conversation, as every source sees it.

    `text` is what the model said (modified text preferred), `thinking` its reasoning; `tool` and
    `result` describe an agy tool run; `usage` is this step's model call, if it made one.
    """

    index: int
    kind: StepKind
    status: StepStatus
    step_type: int = 0
    text: str = ""
    thinking: str = ""
    tool: ToolCall | None = None
    result: ToolResult | None = None
    usage: StepUsage | None = None
    title: str = ""
    error: str = ""
    interaction: Interaction | None = None
    conversation_id: str = ""
    trajectory_id: str = ""
    execution_id: str = ""
    created_at_ms: int = 0
    stop_reason: str = ""
    requested_tool_calls: tuple[ToolCall, ...] = ()

    @property
    def final(self) -> bool:
        """True when this row can no longer change: terminal, and not an empty planner placeholder."""
        if not self.status.terminal:
            return False
        if self.kind is StepKind.ASSISTANT:
            return bool(self.text or self.thinking or self.requested_tool_calls or self.error)
        return True

    def to_json(self) -> dict[str, Any]:
        """The `replay --format steps` shape (camelCase keys, fixed set)."""
        return {
            "index": self.index,
            "kind": self.kind.value,
            "status": self.status.value,
            "text": self.text,
            "thinking": self.thinking,
            "tool": None
            if self.tool is None
            else {
                "id": self.tool.id,
                "name": self.tool.name,
                "arguments": dict(self.tool.arguments),
            },
            "result": None
            if self.result is None
            else {
                "output": self.result.output,
                "exitCode": self.result.exit_code,
                "isError": self.result.is_error,
            },
            "usage": None
            if self.usage is None
            else {
                "input": self.usage.input,
                "output": self.usage.output,
                "cacheRead": self.usage.cache_read,
                "cacheWrite": self.usage.cache_write,
            },
            "title": self.title,
            "error": self.error,
            "conversationId": self.conversation_id,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a source says a turn ended, beyond its steps (stream-json `result`, process exit).

    `usage` replaces the per-step sum when the source states the turn's total; `quota` is set
    when agy refused the turn for quota (`error` then holds agy's words, saying when it resets).
    """

    ok: bool = True
    error: str = ""
    aborted: bool = False
    usage: StepUsage | None = None
    quota: QuotaInfo | None = None
