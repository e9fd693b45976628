"""Scenarios: what the simulated agy does in a turn, as validated, typed data.

Owns the scenario file format (`sim/scenarios/<name>.json`) and `load_scenario()`.

A scenario says what agy does, not how: the steps of a turn with their timing and text chunks, the
tools the model runs and how their permission prompts and questions resolve, usage per model call,
the model catalog, and faults keyed by step index. The server's own faults sit under `"server"` and
are passed through untouched (the language server reads them). `process_turns` names, per turn of
one persistent process, another scenario's turn to play (`TurnPlay`; chosen in `sim/plays.py`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agy_provider.errors import UsageError

__all__ = [
    "DEFAULT_CATALOG",
    "MCP_RESULT_PLACEHOLDER",
    "CatalogModel",
    "ErrorSpec",
    "Faults",
    "LockFault",
    "McpCallSpec",
    "PermissionSpec",
    "PlannerSpec",
    "QuestionSpec",
    "Scenario",
    "StepSpec",
    "SubagentSpec",
    "SystemMessageSpec",
    "ToolSpec",
    "TurnPlay",
    "TurnSpec",
    "Usage",
    "builtin_scenarios",
    "load_scenario",
    "parse_scenario",
]


@dataclasses.dataclass(frozen=True, slots=True)
class CatalogModel:
    """One `agy models` line; `placeholder` is n in MODEL_PLACEHOLDER_M<n>."""

    slug: str
    name: str
    placeholder: int = 20
    provider: str = "API_PROVIDER_GOOGLE_GEMINI"


def _gemini(slug: str, name: str, placeholder: int) -> CatalogModel:
    return CatalogModel(slug, name, placeholder)


# agy 1.1.25's catalog (what `agy models` printed); placeholders are ours, one per model.
DEFAULT_CATALOG: tuple[CatalogModel, ...] = (
    _gemini("gemini-3.8-flash-high", "Gemini 3.8 Flash (High)", 110),
    _gemini("gemini-3.8-flash-medium", "Gemini 3.8 Flash (Medium)", 71),
    _gemini("gemini-3.8-flash-low", "Gemini 3.8 Flash (Low)", 120),
    _gemini("gemini-3.7-flash-high", "Gemini 3.7 Flash (High)", 130),
    _gemini("gemini-3.7-flash-medium", "Gemini 3.7 Flash (Medium)", 20),
    _gemini("gemini-3.7-flash-low", "Gemini 3.7 Flash (Low)", 140),
    _gemini("gemini-3.6-flash-high", "Gemini 3.6 Flash (High)", 150),
    _gemini("gemini-3.6-flash-medium", "Gemini 3.6 Flash (Medium)", 36),
    _gemini("gemini-3.6-flash-low", "Gemini 3.6 Flash (Low)", 160),
    _gemini("gemini-3.1-pro-high", "Gemini 3.1 Pro (High)", 170),
    _gemini("gemini-3.1-pro-low", "Gemini 3.1 Pro (Low)", 180),
    CatalogModel(
        "claude-sonnet-4-6", "Claude Sonnet 4.6 (Thinking)", 190, "API_PROVIDER_ANTHROPIC_VERTEX"
    ),
    CatalogModel(
        "claude-opus-4-6-thinking",
        "Claude Opus 4.6 (Thinking)",
        299,
        "API_PROVIDER_ANTHROPIC_VERTEX",
    ),
    CatalogModel("gpt-oss-120b-medium", "GPT-OSS 120B (Medium)", 50, "API_PROVIDER_OPENAI_VERTEX"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """One model call's tokens. `output` = thinking + response."""

    input: int = 0
    thinking: int = 0
    response: int = 0
    cache_read: int = 0

    @property
    def output(self) -> int:
        return self.thinking + self.response


@dataclasses.dataclass(frozen=True, slots=True)
class PermissionSpec:
    """How a permission prompt resolves when nobody answers it over RPC.

    `auto` "allow"/"deny" resolves at once without waiting; otherwise the step waits `timeout_ms`
    and then `on_timeout`: "deny" (ERROR, user denied) or "reask" (ERROR, asked again at a higher
    index, at most `max_reasks` times, then denied).
    """

    auto: str | None = None
    timeout_ms: int = 300_000
    on_timeout: str = "deny"
    max_reasks: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class QuestionSpec:
    question: str
    options: tuple[str, ...]
    multi_select: bool = False


# In a planner's text after an MCP tool call of the same turn, this becomes the call's result.
MCP_RESULT_PLACEHOLDER = "{mcp_result}"


@dataclasses.dataclass(frozen=True, slots=True)
class McpCallSpec:
    """A call of a tool an MCP server offers (one agy reads from an `--add-dir` root's
    `.agents/mcp_config.json`): `server` by its config name ("" for the first one found), the
    server's own `tool` name and its `arguments`. A planner's text `{mcp_result}` later in the
    turn becomes the call's result."""

    tool: str
    arguments: Mapping[str, Any]
    server: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool run the model asks for. `name` is agy's tool name (run_command, view_file, list_dir,
    ask_question, …); `args` its PascalCase arguments; `output`/`exit_code` what it produced."""

    name: str
    args: Mapping[str, Any]
    output: str = ""
    exit_code: int = 0
    duration_ms: int = 60
    needs_permission: bool = False
    permission: PermissionSpec = PermissionSpec()
    questions: tuple[QuestionSpec, ...] = ()
    auto_answer: tuple[str, ...] | None = None
    tool_action: str = ""
    tool_summary: str = ""
    mcp: McpCallSpec | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PlannerSpec:
    """One model call: thinking chunks, then text chunks, then the tools it asks for."""

    thinking: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    chunk_ms: int = 120
    first_token_ms: int = 300
    usage: Usage = Usage()
    tools: tuple[ToolSpec, ...] = ()
    placeholder_done: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SystemMessageSpec:
    message: str
    event_type: str = "task_notification"


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorSpec:
    """The model call fails: the planner ends ERROR and an ERROR_MESSAGE (17) step follows."""

    user_message: str
    short_error: str
    full_error: str
    error_code: int = 429
    exit_code: int = 1
    delay_ms: int = 400


@dataclasses.dataclass(frozen=True, slots=True)
class SubagentSpec:
    """A subagent: another conversation database written while this turn runs.

    `role` and `type_name` are what stream-json's `subagent_info` names it by.
    """

    prompt: str
    text: tuple[str, ...]
    chunk_ms: int = 80
    role: str = "researcher"
    type_name: str = "research"


StepSpec = PlannerSpec | SystemMessageSpec | ErrorSpec | SubagentSpec


@dataclasses.dataclass(frozen=True, slots=True)
class TurnSpec:
    steps: tuple[StepSpec, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class LockFault:
    at_step: int
    ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class Faults:
    """Faults keyed by database step index (the row about to be written).

    `crash_between_turns_ms`: a persistent agy (`--input-format stream-json`) prints this turn's
    `result`, stays idle that long without reading stdin, then dies with `crash_message` on
    stderr and `crash_exit_code`.
    """

    crash_at_step: int | None = None
    crash_exit_code: int = 2
    crash_message: str = ""
    hang_at_step: int | None = None
    commit_delay_ms: int = 0
    lock: LockFault | None = None
    corrupt_step: int | None = None
    crash_between_turns_ms: int | None = None

    def shifted(self, offset: int) -> Faults:
        """The same faults with every step index moved `offset` rows later."""

        def move(index: int | None) -> int | None:
            return None if index is None else index + offset

        lock = self.lock
        return dataclasses.replace(
            self,
            crash_at_step=move(self.crash_at_step),
            hang_at_step=move(self.hang_at_step),
            corrupt_step=move(self.corrupt_step),
            lock=None if lock is None else LockFault(lock.at_step + offset, lock.ms),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A whole scenario. Turn i of a conversation plays `turns[min(i, len(turns) - 1)]`.

    `permission_mode` "strict" denies every permission at once (agy's strict settings);
    `quota_exhausted`, when set, is agy's message for a turn refused before it starts (exit 1,
    no steps). How a print-mode denial ends the turn depends on the agy version imitated.
    """

    name: str
    description: str
    turns: tuple[TurnSpec, ...]
    title: str = "Friendly Greeting"
    model: str = "gemini-3.8-flash-medium"
    catalog: tuple[CatalogModel, ...] = DEFAULT_CATALOG
    cold_start_ms: int = 150
    # The scenario file states its cold start: what a test says agy does wins over the defaults.
    cold_start_stated: bool = False
    placeholder_done: bool = False
    permission_mode: str = "request-review"
    quota_exhausted: str = ""
    faults: Faults = Faults()
    server: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    process_turns: tuple[str, ...] = ()

    def turn(self, number: int) -> TurnSpec:
        """The spec for turn `number` (0-based) of a conversation."""
        return self.turns[min(number, len(self.turns) - 1)]

    def find_model(self, slug: str) -> CatalogModel | None:
        return next((m for m in self.catalog if m.slug == slug), None)


@dataclasses.dataclass(frozen=True, slots=True)
class TurnPlay:
    """One turn played from another scenario: its turn `turn` (0-based) with its faults counted
    from that turn's first row, so `crash_at_step: 3` means the fourth row of the turn."""

    scenario: Scenario
    turn: int = 0

    def scenario_at(self, first_row: int) -> Scenario:
        """A one-turn scenario for a turn whose first row is `first_row`."""
        return dataclasses.replace(
            self.scenario,
            turns=(self.scenario.turn(self.turn),),
            faults=self.scenario.faults.shifted(first_row),
        )


# --- parsing --------------------------------------------------------------------------------


class _Reader:
    """Typed access to one JSON object, naming the path in every error."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise UsageError(f"scenario: {where} must be an object")
        self.data: dict[str, Any] = data
        self.where = where

    def _get(self, key: str, kinds: tuple[type, ...], default: Any) -> Any:
        value = self.data.get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) and bool not in kinds:
            raise UsageError(f"scenario: {self.where}.{key} has the wrong type")
        if not isinstance(value, kinds):
            raise UsageError(f"scenario: {self.where}.{key} has the wrong type")
        return value

    def text(self, key: str, default: Any = "") -> Any:
        return self._get(key, (str,), default)

    def num(self, key: str, default: Any = 0) -> Any:
        return self._get(key, (int,), default)

    def flag(self, key: str, default: Any = False) -> Any:
        return self._get(key, (bool,), default)

    def strs(self, key: str) -> tuple[str, ...]:
        value = self._get(key, (list, str), [])
        items = [value] if isinstance(value, str) else value
        if not all(isinstance(item, str) for item in items):
            raise UsageError(f"scenario: {self.where}.{key} must be a list of strings")
        return tuple(items)

    def objs(self, key: str) -> list[_Reader]:
        value = self._get(key, (list,), [])
        return [_Reader(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(value)]

    def obj(self, key: str) -> _Reader | None:
        value = self.data.get(key)
        return None if value is None else _Reader(value, f"{self.where}.{key}")

    def choice(self, key: str, allowed: Sequence[Any], default: str | None) -> Any:
        value = self.data.get(key, default)
        if value not in allowed:
            raise UsageError(f"scenario: {self.where}.{key} must be one of {list(allowed)}")
        return value


def _usage(r: _Reader | None) -> Usage:
    if r is None:
        return Usage()
    return Usage(r.num("input"), r.num("thinking"), r.num("response"), r.num("cache_read"))


def _tool(r: _Reader) -> ToolSpec:
    p = r.obj("permission")
    permission = PermissionSpec()
    if p is not None:
        permission = PermissionSpec(
            auto=p.choice("auto", [None, "allow", "deny"], None),
            timeout_ms=p.num("timeout_ms", 300_000),
            on_timeout=p.choice("on_timeout", ["deny", "reask"], "deny"),
            max_reasks=p.num("max_reasks", 1),
        )
    questions = tuple(
        QuestionSpec(q.text("question"), q.strs("options"), q.flag("multi_select"))
        for q in r.objs("questions")
    )
    name = r.text("name")
    if not name:
        raise UsageError(f"scenario: {r.where}.name is required")
    args = r.data.get("args", {})
    if not isinstance(args, dict):
        raise UsageError(f"scenario: {r.where}.args must be an object")
    auto_answer = r.strs("auto_answer") if "auto_answer" in r.data else None
    m = r.obj("mcp")
    mcp = None
    if m is not None:
        arguments = m.data.get("arguments", {})
        if not isinstance(arguments, dict):
            raise UsageError(f"scenario: {m.where}.arguments must be an object")
        if not m.text("tool"):
            raise UsageError(f"scenario: {m.where}.tool is required")
        mcp = McpCallSpec(tool=m.text("tool"), arguments=arguments, server=m.text("server"))
        if "args" not in r.data:
            args = dict(arguments)  # the model's call carries the MCP arguments
    return ToolSpec(
        name=name,
        args=args,
        output=r.text("output"),
        exit_code=r.num("exit_code"),
        duration_ms=r.num("duration_ms", 60),
        needs_permission=r.flag("needs_permission"),
        permission=permission,
        questions=questions,
        auto_answer=auto_answer,
        tool_action=r.text("tool_action"),
        tool_summary=r.text("tool_summary"),
        mcp=mcp,
    )


def _step(r: _Reader) -> StepSpec:
    kind = r.choice("type", ["planner", "system_message", "error", "subagent"], "planner")
    if kind == "system_message":
        return SystemMessageSpec(r.text("message"), r.text("event_type", "task_notification"))
    if kind == "error":
        return ErrorSpec(
            user_message=r.text("user_message"),
            short_error=r.text("short_error"),
            full_error=r.text("full_error"),
            error_code=r.num("error_code", 429),
            exit_code=r.num("exit_code", 1),
            delay_ms=r.num("delay_ms", 400),
        )
    if kind == "subagent":
        return SubagentSpec(
            r.text("prompt"),
            r.strs("text"),
            r.num("chunk_ms", 80),
            r.text("role", "researcher"),
            r.text("type_name", "research"),
        )
    placeholder = r.data.get("placeholder_done")
    if placeholder is not None and not isinstance(placeholder, bool):
        raise UsageError(f"scenario: {r.where}.placeholder_done must be a boolean")
    return PlannerSpec(
        thinking=r.strs("thinking"),
        text=r.strs("text"),
        chunk_ms=r.num("chunk_ms", 120),
        first_token_ms=r.num("first_token_ms", 300),
        usage=_usage(r.obj("usage")),
        tools=tuple(_tool(t) for t in r.objs("tools")),
        placeholder_done=placeholder,
    )


def _faults(r: _Reader | None) -> Faults:
    if r is None:
        return Faults()
    lock = r.obj("lock")

    def optional_int(key: str) -> int | None:
        value: int | None = r.num(key, None)
        return value

    return Faults(
        crash_at_step=optional_int("crash_at_step"),
        crash_exit_code=r.num("crash_exit_code", 2),
        crash_message=r.text("crash_message"),
        hang_at_step=optional_int("hang_at_step"),
        commit_delay_ms=r.num("commit_delay_ms"),
        lock=None if lock is None else LockFault(lock.num("at_step"), lock.num("ms", 1000)),
        corrupt_step=optional_int("corrupt_step"),
        crash_between_turns_ms=optional_int("crash_between_turns_ms"),
    )


def parse_scenario(data: Any, name: str = "") -> Scenario:
    """Validate a decoded scenario document. Raises `UsageError` naming the bad key."""
    r = _Reader(data, name or "scenario")
    turns = tuple(TurnSpec(tuple(_step(s) for s in t.objs("steps"))) for t in r.objs("turns"))
    if not turns:
        raise UsageError(f"scenario {name!r}: needs at least one turn")
    catalog = (
        tuple(
            CatalogModel(
                m.text("slug"),
                m.text("name"),
                m.num("placeholder", 20),
                m.text("provider", "API_PROVIDER_GOOGLE_GEMINI"),
            )
            for m in r.objs("catalog")
        )
        or DEFAULT_CATALOG
    )
    server = r.data.get("server", {})
    if not isinstance(server, dict):
        raise UsageError(f"scenario {name!r}: server must be an object")
    return Scenario(
        name=r.text("name", name),
        description=r.text("description"),
        turns=turns,
        title=r.text("title", "Friendly Greeting"),
        model=r.text("model", "gemini-3.8-flash-medium"),
        catalog=catalog,
        cold_start_ms=r.num("cold_start_ms", 150),
        cold_start_stated="cold_start_ms" in r.data,
        placeholder_done=r.flag("placeholder_done"),
        permission_mode=r.choice("permission_mode", ["request-review", "strict"], "request-review"),
        quota_exhausted=r.text("quota_exhausted"),
        faults=_faults(r.obj("faults")),
        server=server,
        process_turns=r.strs("process_turns"),
    )


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped in `agy_provider/sim/scenarios/`."""
    folder = resources.files("agy_provider.sim.scenarios")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_scenario(name_or_path: str | os.PathLike[str] | None = None) -> Scenario:
    """Load a scenario by built-in name or file path; default `$AGY_SIM_SCENARIO`, else `default`.

    Raises `UsageError` when the scenario does not exist or does not validate.
    """
    spec = str(name_or_path) if name_or_path is not None else os.environ.get("AGY_SIM_SCENARIO", "")
    spec = spec or "default"
    path = Path(spec)
    if spec.endswith(".json") or os.sep in spec or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"scenario file {spec!r} cannot be read: {exc}") from exc
        label = path.stem
    else:
        resource = resources.files("agy_provider.sim.scenarios").joinpath(f"{spec}.json")
        if not resource.is_file():
            known = ", ".join(builtin_scenarios())
            raise UsageError(f"unknown scenario {spec!r} (built-in: {known})")
        text = resource.read_text(encoding="utf-8")
        label = spec
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"scenario {label!r} is not valid JSON: {exc}") from exc
    return parse_scenario(data, label)
