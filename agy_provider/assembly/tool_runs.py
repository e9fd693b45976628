"""Reading back the tool runs the assembler writes into thinking blocks (`▸ tool argument`).

Pure: hosts that show tools on their own (the `llm` plugin, AskAntigravity's progress) use it to
tell a tool run from the model's thinking, and split it into the tool, its key argument and result.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.step import Step, StepStatus
from agy_provider.assembly.diffs import (
    EDIT_TOOLS,
    EditLedger,
    edit_diff,
    edit_target,
    looks_like_diff,
    render_recorded_diff,
)

__all__ = [
    "MAX_TOOL_OUTPUT_CHARS",
    "MAX_TOOL_OUTPUT_LINES",
    "TOOL_RUN_MARK",
    "ToolRun",
    "is_tool_run",
    "name_is_edit",
    "parse_tool_run",
    "render_tool_run",
]

# `assembler.render_tool_run` starts every tool run's block with this mark and the tool's name.
TOOL_RUN_MARK = "▸ "
# What the assembler writes in place of a result: the exit code, a failure, a refusal, a cancel.
_EXIT = re.compile(r"exit (-?\d+)")
_FAILED = ("failed: ", "not run: ")


@dataclasses.dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool run agy made: the tool's name, its key argument as shown, and what came back.

    `output` is the result's lines without the block's two-space indent (a failure, refusal or
    cancel says so on its first line); `exit_code` is set for commands, and then not repeated in
    `output`; `failed` when the tool failed, exited non-zero, was refused or was cancelled.
    """

    name: str
    argument: str
    output: str = ""
    exit_code: int | None = None
    failed: bool = False

    @property
    def result(self) -> str:
        """What came back, as a person reads it: a non-zero exit code first, then the output."""
        if self.exit_code:
            return f"exit {self.exit_code}\n{self.output}".rstrip("\n")
        return self.output

    @property
    def header(self) -> str:
        """The run as one line: `▸ tool argument`."""
        return f"{TOOL_RUN_MARK}{self.name} {self.argument}".rstrip()


def is_tool_run(text: str) -> bool:
    """True when a thinking block's text is a tool run, not the model's thinking."""
    return text.startswith(TOOL_RUN_MARK) and len(text) > len(TOOL_RUN_MARK)


def parse_tool_run(text: str) -> ToolRun | None:
    """The tool run a thinking block holds (its first line the header), or None for thinking.

    A block still streaming may hold the header alone; the result lines follow once agy settled
    the step.
    """
    if not is_tool_run(text):
        return None
    header, _, rest = text.partition("\n")
    name, _, argument = header[len(TOOL_RUN_MARK) :].partition(" ")
    lines = [line[2:] if line.startswith("  ") else line for line in rest.rstrip("\n").split("\n")]
    if lines == [""]:
        lines = []
    exit_code: int | None = None
    failed = False
    if lines:
        first = lines[0]
        exit_match = _EXIT.fullmatch(first)
        if exit_match:
            exit_code = int(exit_match.group(1))
            failed = exit_code != 0
            lines = lines[1:]
        elif first == "canceled" or first.startswith(_FAILED):
            failed = True
    return ToolRun(
        name=name.strip(),
        argument=argument.strip(),
        output="\n".join(lines),
        exit_code=exit_code,
        failed=failed,
    )


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
    tool = step.tool
    if tool is None:
        return ""
    lines = [f"▸ {tool.name} {_key_argument(tool.name, tool.arguments)}".rstrip()]
    if not step.status.terminal:
        return lines[0] + "\n"
    result = step.result
    if step.step_type == 17:
        # Refused before it ran (a policy denial in Google's runtime): say so, with who refused.
        lines.append(f"  not run: {step.error or 'refused'}")
        return "\n".join(lines) + "\n"
    output = result.output if result is not None else ""
    if name_is_edit(tool.name):
        recorded = bool(output) and looks_like_diff(output)
        lines.extend("  " + line for line in _edit_lines(step, edits, recorded=recorded))
        if recorded:
            output = ""  # shown above as the diff
    if step.status is StepStatus.CANCELED:
        lines.append("  canceled")
    elif result is not None:
        if result.exit_code is not None:
            lines.append(f"  exit {result.exit_code}")
        elif result.is_error:
            lines.append(f"  failed: {result.output or step.error or 'error'}".rstrip())
        if output and not (result.is_error and result.exit_code is None):
            lines.extend("  " + line for line in _clip(output))
    elif step.error:
        lines.append(f"  failed: {step.error}")
    return "\n".join(lines) + "\n"


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
