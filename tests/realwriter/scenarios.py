"""The real-writer scenarios, as data: what the scripted model says, and what a turn must show.

`{ws}` in a reply stands for the scenario's workspace folder (filled in when the scenario runs).
`expect` holds one entry per turn: the answer text exactly, lines its tool blocks must contain,
and the error the turn must end with ("" for a clean `done`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from realwriter.harness import Scenario

__all__ = ["SCENARIOS", "Expect", "by_name"]


@dataclasses.dataclass(frozen=True)
class Expect:
    text: str
    tools: Sequence[str] = ()
    thinking: str = ""
    error: str = ""
    not_in_error: Sequence[str] = ()


def call(name: str, **args: Any) -> dict[str, Any]:
    args.setdefault("toolAction", "Working")
    args.setdefault("toolSummary", "Test step")
    return {"functionCall": {"name": name, "args": args}}


def text(*chunks: str, match: str = "", delay: float = 0.0, **extra: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {"chunks": [[{"text": c}] for c in chunks], **extra}
    if match:
        reply["match"] = match
    if delay:
        reply["delay"] = delay
    return reply


def tool(*parts: dict[str, Any], match: str = "") -> dict[str, Any]:
    reply: dict[str, Any] = {"chunks": [list(parts)]}
    if match:
        reply["match"] = match
    return reply


USAGE = {
    "promptTokenCount": 120,
    "cachedContentTokenCount": 20,
    "candidatesTokenCount": 30,
    "thoughtsTokenCount": 12,
    "totalTokenCount": 162,
}

_ERROR_429 = {"status": 429, "code_name": "RESOURCE_EXHAUSTED",
              "message": "Resource has been exhausted (e.g. check quota)."}

SCENARIOS: list[tuple[Scenario, list[Expect]]] = [
    (
        Scenario(
            name="rw-streaming",
            turns=["Say hello slowly."],
            replies=[
                {
                    "chunks": [
                        [{"text": "Let me think about greetings.", "thought": True}],
                        [{"text": "Hello"}],
                        [{"text": ", streaming "}],
                        [{"text": "world — "}],
                        [{"text": "done.\nSecond line ✓"}],
                    ],
                    "delay": 0.25,
                    "usage": USAGE,
                }
            ],
        ),
        [
            Expect(
                text="Hello, streaming world — done.\nSecond line ✓",
                thinking="Let me think about greetings.",
            )
        ],
    ),
    (
        Scenario(
            name="rw-text-and-tool",
            turns=["Say something, then run a command."],
            replies=[
                {
                    "chunks": [
                        [{"text": "Planning the command.", "thought": True}],
                        [{"text": "Let me check."}],
                        [{"text": " Running it now."}],
                        [call("run_command", CommandLine="echo text-then-tool", Cwd="{ws}",
                              WaitMsBeforeAsync=5000)],
                    ],
                    "delay": 0.2,
                },
                text("It printed text-then-tool.", match="text-then-tool"),
            ],
        ),
        [
            Expect(
                text="Let me check. Running it now.It printed text-then-tool.",
                thinking="Planning the command.",
                tools=["▸ run_command echo text-then-tool", "exit 0", "text-then-tool"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-multiturn",
            turns=["First question?", "Second question?", "Third, after a resume?"],
            replies=[
                text("First answer.", match="First question"),
                text("Second ", "answer.", match="Second question", delay=0.1),
                text("Third answer, resumed.", match="after a resume"),
            ],
            resume_at=2,
        ),
        [
            Expect(text="First answer."),
            Expect(text="Second answer."),
            Expect(text="Third answer, resumed."),
        ],
    ),
    (
        Scenario(
            name="rw-commands",
            turns=["Run two commands."],
            replies=[
                tool(call("run_command", CommandLine="echo hello-ok", Cwd="{ws}",
                          WaitMsBeforeAsync=5000)),
                tool(call("run_command", CommandLine="echo boom; exit 1", Cwd="{ws}",
                          WaitMsBeforeAsync=5000), match="hello-ok"),
                text("The first worked, the second failed.", match="boom"),
            ],
        ),
        [
            Expect(
                text="The first worked, the second failed.",
                tools=["▸ run_command echo hello-ok", "exit 0", "hello-ok",
                       "▸ run_command echo boom; exit 1", "exit 1", "boom"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-bigoutput",
            turns=["Print many lines."],
            replies=[
                tool(call("run_command", CommandLine="seq 1 20000", Cwd="{ws}",
                          WaitMsBeforeAsync=5000)),
                text("Printed them.", match="19999"),
            ],
        ),
        [
            Expect(
                text="Printed them.",
                tools=["▸ run_command seq 1 20000", "exit 0", "<truncated", "more lines)"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-files",
            turns=["Look around and fix the notes."],
            replies=[
                tool(call("list_dir", DirectoryPath="{ws}")),
                tool(call("view_file", AbsolutePath="{ws}/notes.txt"), match="notes.txt"),
                tool(call("grep_search", Query="beta", SearchPath="{ws}"), match="alpha"),
                tool(
                    call("replace_file_content", TargetFile="{ws}/notes.txt",
                         Instruction="Rename beta", Description="Rename beta",
                         AllowMultiple=False, TargetContent="beta",
                         ReplacementContent="gamma", StartLine=2, EndLine=2),
                    match="grep_search",
                ),
                tool(
                    call("write_to_file", TargetFile="{ws}/src/new.py", Overwrite=False,
                         CodeContent="print('new')\n", Description="A new file"),
                    match="replace_file_content",
                ),
                text("Renamed beta to gamma and added src/new.py.", match="write_to_file"),
            ],
            enabled_tools=["list_directory", "view_file", "search_directory", "create_file",
                           "edit_file"],
        ),
        [
            Expect(
                text="Renamed beta to gamma and added src/new.py.",
                tools=["▸ list_dir {ws}", "notes.txt (11 bytes)", "src/",
                       "▸ view_file {ws}/notes.txt", "alpha",
                       "▸ grep_search beta {ws}", "notes.txt",
                       "▸ replace_file_content {ws}/notes.txt", " alpha", "-beta", "+gamma",
                       "▸ write_to_file {ws}/src/new.py", "+print('new')"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-mcp",
            turns=["Look up widgets."],
            replies=[
                tool(call("mcp_inventory_lookup", key="widgets")),
                text("There are 42 widgets.", match="mcp_inventory_lookup"),
            ],
            mcp=True,
        ),
        [
            Expect(
                text="There are 42 widgets.",
                tools=["▸ inventory/lookup widgets", "inventory[widgets] = 42 widgets"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-hosttool",
            turns=["Count the words."],
            replies=[
                tool(call("count_words", text="one two three")),
                text("Three words.", match="count_words"),
            ],
            host_tool=True,
        ),
        [Expect(text="Three words.", tools=["▸ count_words one two three", "3"])],
    ),
    (
        Scenario(
            name="rw-subagent",
            turns=["Ask a helper."],
            replies=[
                tool(
                    call(
                        "invoke_subagent",
                        Subagents=[
                            {
                                "TypeName": "research",
                                "Role": "Codebase Researcher",
                                "Prompt": "CHILD-TASK: say hi",
                            }
                        ],
                    )
                ),
                text("Child says hi.", match="CHILD-TASK"),
                # Held until the child answered and went idle, so its "gone idle" message
                # reaches the parent within this turn, not after it.
                text("The helper is on it.", match="invoke_subagent", after="CHILD-TASK",
                     after_delay=0.5),
                text("The helper said hi.", match="Child says hi"),
            ],
        ),
        [
            Expect(
                text="The helper is on it.The helper said hi.",
                tools=["▸ invoke_subagent Codebase Researcher: CHILD-TASK: say hi",
                       "child conversation "],
            )
        ],
    ),
    (
        Scenario(
            name="rw-denied",
            turns=["Run a command you may not run."],
            replies=[
                tool(call("run_command", CommandLine="echo secret", Cwd="{ws}",
                          WaitMsBeforeAsync=5000)),
                text("I was not allowed to run it.", match="run_command"),
            ],
            deny=["run_command"],
        ),
        [
            Expect(
                text="I was not allowed to run it.",
                tools=["▸ run_command echo secret", "not run: denied by pre-tool hook"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-cancel",
            turns=["Run something slow."],
            replies=[
                tool(call("run_command", CommandLine="sleep 30", Cwd="{ws}",
                          WaitMsBeforeAsync=20000)),
                text("(never asked)", match="sleep"),
            ],
            cancel_tool="run_command",
        ),
        [Expect(text="", tools=["▸ run_command sleep 30", "canceled"])],
    ),
    (
        Scenario(
            name="rw-invalid-output",
            turns=["Answer on the second try."],
            # An empty reply is "invalid output": the runtime writes an error row and retries.
            replies=[{"chunks": [[{"text": ""}]]}, text("Second try worked.")],
        ),
        [Expect(text="Second try worked.")],
    ),
    (
        Scenario(
            name="rw-quota",
            turns=["Hit the quota."],
            replies=[_ERROR_429, _ERROR_429, _ERROR_429],
        ),
        [
            Expect(
                text="",
                error="Error 429",
                not_in_error=["goroutine", ".go:", "Agent execution terminated"],
            )
        ],
    ),
    (
        Scenario(
            name="rw-badrequest",
            turns=["Send a bad request."],
            replies=[{"status": 400, "code_name": "INVALID_ARGUMENT",
                      "message": "Request contains an invalid argument."}],
        ),
        [
            Expect(
                text="",
                error="Error 400",
                not_in_error=["goroutine", ".go:", "Agent execution terminated"],
            )
        ],
    ),
]


def by_name(name: str) -> tuple[Scenario, list[Expect]]:
    for scenario, expect in SCENARIOS:
        if scenario.name == name:
            return scenario, expect
    raise KeyError(name)
