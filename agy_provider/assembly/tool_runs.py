"""Reading back the tool runs the assembler writes into thinking blocks (`▸ tool argument`).

Pure: hosts that show tools on their own (the `llm` plugin, AskAntigravity's progress) use it to
tell a tool run from the model's thinking, and split it into the tool, its key argument and result.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["TOOL_RUN_MARK", "ToolRun", "is_tool_run", "parse_tool_run"]

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
