"""agy's tool runs as values (pi.tool_run.ToolRun) and as the thinking text that shows them.

Pure: agy runs its own tools; the assembler streams each run as a thinking block whose text is
`render_tool_run` (`▸ tool key-argument`, the exit code, the output) and whose events carry the
`tool_run` value, which hosts (the `llm` plugin, AskAntigravity's progress) read instead of the text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepStatus
from agy_provider.assembly.diffs import EDIT_TOOLS
from agy_provider.assembly.diffs import EditLedger
from agy_provider.assembly.diffs import edit_diff
from agy_provider.assembly.diffs import edit_target
from agy_provider.assembly.diffs import looks_like_diff
from agy_provider.assembly.diffs import render_recorded_diff
from agy_provider.pi.tool_run import ToolRun

__all__ = [
    "MAX_TOOL_OUTPUT_CHARS",
    "MAX_TOOL_OUTPUT_LINES",
    "TOOL_RUN_MARK",
    "name_is_edit",
    "render_and_run",
    "render_tool_run",
    "tool_run",
]

# Every tool run's block starts with this mark and the tool's name.
TOOL_RUN_MARK = "▸ "


# Tool output longer than this many lines is cut in the rendered block (agy keeps the full text).
MAX_TOOL_OUTPUT_LINES = 40
MAX_TOOL_OUTPUT_CHARS = 4000

# The argument that says what a tool run was about, per agy tool (AGY-FORMATS §3.5).
_KEY_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "run_command": ("CommandLine",),
    "view_file": ("AbsolutePath",),
    "list_dir": ("DirectoryPath",),
    "grep_search": ("Query", "SearchPath"),
    "find_by_name": ("Pattern", "SearchDirectory"),
    "write_to_file": ("TargetFile",),
    "replace_file_content": ("TargetFile",),
    "multi_replace_file_content": ("TargetFile",),
}


def render_tool_run(step: Step, edits: EditLedger | None = None) -> str:
    """A tool run as readable lines: `▸ tool key-argument`, then its result once it settled.

    The header never changes once written, and the result is only appended when the step is
    final, so successive renders of one step only ever grow. Edits show as unified diffs
    (`agy_provider.assembly.diffs`): `edits` is the turn's ledger (old texts from HEAD or the turn's
    earlier edits, each step rendered once); without it a diff is made from the call alone.
    """
    rendered = render_and_run(step, edits)
    return "" if rendered is None else rendered[0]


def tool_run(step: Step, edits: EditLedger | None = None) -> ToolRun | None:
    """The tool run a step is, as the value hosts read (what `render_tool_run` shows); None
    for a step without a tool call."""
    rendered = render_and_run(step, edits)
    return None if rendered is None else rendered[1]


def render_and_run(step: Step, edits: EditLedger | None) -> tuple[str, ToolRun] | None:
    """`render_tool_run` and `tool_run` at once (the ledger renders each edit once)."""
    tool = step.tool
    if tool is None:
        return None
    argument = _key_argument(tool.name, tool.arguments)
    run = ToolRun(name=tool.name, argument=argument, arguments=dict(tool.arguments))
    lines = [f"{TOOL_RUN_MARK}{tool.name} {argument}".rstrip()]
    if not step.status.terminal:
        return lines[0] + "\n", run
    result = step.result
    # The line that shows the exit code, the code it shows, and what failed the run.
    exit_at, exit_code, error = 0, None, None
    if step.step_type == 17:
        # Refused before it ran (a policy denial in Google's runtime): say so, with who refused.
        error = step.error or "refused"
        lines.append(f"  not run: {error}")
        return _ran(lines, run, exit_code, error, exit_at)
    output = result.output if result is not None else ""
    if name_is_edit(tool.name):
        recorded = bool(output) and looks_like_diff(output)
        lines.extend("  " + line for line in _edit_lines(step, edits, recorded=recorded))
        if recorded:
            output = ""  # shown above as the diff
    if step.status is StepStatus.CANCELED:
        error = "canceled"
        lines.append("  canceled")
    elif result is not None:
        if result.exit_code is not None:
            exit_at, exit_code = len(lines), result.exit_code
            lines.append(f"  exit {result.exit_code}")
        elif result.is_error:
            error = (result.output or step.error or "error").rstrip()
            lines.append(f"  failed: {result.output or step.error or 'error'}".rstrip())
        if output and not (result.is_error and result.exit_code is None):
            lines.extend("  " + line for line in _clip(output))
    elif step.error:
        error = step.error
        lines.append(f"  failed: {step.error}")
    return _ran(lines, run, exit_code, error, exit_at)


def _ran(
    lines: list[str], run: ToolRun, exit_code: int | None, error: str | None, exit_at: int
) -> tuple[str, ToolRun]:
    """The settled run's text, and its value with the result lines the text shows."""
    shown = [line[2:] for i, line in enumerate(lines) if i and i != exit_at]
    output = "\n".join(shown)
    value = dataclasses.replace(run, output=output, exit_code=exit_code, error=error, settled=True)
    return "\n".join(lines) + "\n", value


def name_is_edit(name: str) -> bool:
    """True for tools that edit files, whose result is best shown as a diff."""
    return name in _EDIT_TOOLS


# Tools whose run is an edit of a file (agy's names, and Google's runtime's code-action alias).
_EDIT_TOOLS = EDIT_TOOLS


def _key_argument(name: str, arguments: Mapping[str, Any]) -> str:
    questions = arguments.get("questions")
    if name == "ask_question" and isinstance(questions, list) and questions:
        first = questions[0]
        return str(first.get("question", "")) if isinstance(first, dict) else str(first)
    subagents = arguments.get("Subagents")
    if name == "invoke_subagent" and isinstance(subagents, list) and subagents:
        return "; ".join(_subagent_label(spec) for spec in subagents)
    keys = _KEY_ARGUMENTS.get(name)
    if keys:
        values = [str(arguments[k]) for k in keys if arguments.get(k) not in (None, "")]
        if values:
            return " ".join(values)
    for key, value in arguments.items():
        if key not in ("toolAction", "toolSummary") and isinstance(value, str) and value:
            return value if len(value) <= 120 else value[:117] + "..."
    summary = arguments.get("toolSummary")
    return str(summary) if summary else ""


def _edit_lines(step: Step, edits: EditLedger | None, *, recorded: bool) -> list[str]:
    """An edit as unified-diff lines (unindented).

    Google's runtime records the diff itself (code action 10.2.1.2), which then stands in for
    the arguments; agy stores none (AGY-FORMATS §3.5), so its edits are diffed from the call's
    arguments against the old text. A failed edit changed nothing: it is shown from its call
    alone and leaves the turn's idea of the file as it was.
    """
    assert step.tool is not None
    name, arguments = step.tool.name, step.tool.arguments
    if recorded:
        assert step.result is not None
        if edits is not None:
            edits.forget_text(edit_target(arguments))
        return render_recorded_diff(step.result.output)
    if name == "code_action":
        return []  # a code action without its diff has no call arguments to show it from
    failed = step.status is not StepStatus.DONE or (
        step.result is not None and step.result.is_error
    )
    if edits is None or failed:
        return list(edit_diff(name, arguments).lines)
    return list(edits.render(step.index, name, arguments))


def _subagent_label(spec: object) -> str:
    """`Role: prompt` of one subagent a call launches (invoke_subagent's `Subagents[]`)."""
    if not isinstance(spec, dict):
        return str(spec)
    role = str(spec.get("Role") or spec.get("TypeName") or "subagent")
    prompt = str(spec.get("Prompt") or "")
    if len(prompt) > 120:
        prompt = prompt[:117] + "..."
    return f"{role}: {prompt}" if prompt else role


def _clip(text: str) -> list[str]:
    text = text[:MAX_TOOL_OUTPUT_CHARS]
    # Commands run in a terminal end lines with CRLF: a bare CR left in would garble a line.
    lines = text.replace("\r\n", "\n").rstrip("\n").split("\n")
    if len(lines) > MAX_TOOL_OUTPUT_LINES:
        more = len(lines) - MAX_TOOL_OUTPUT_LINES
        lines = [*lines[:MAX_TOOL_OUTPUT_LINES], f"… ({more} more lines)"]
    return lines
