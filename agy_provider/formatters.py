"""Render replayed or live turns for machines (JSON lines) and people (transcript, markdown).

Pure string builders; the CLI decides where the text goes and whether colour is on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence

from agy_provider.agy.step import Step
from agy_provider.types import AssistantMessage, AssistantMessageEvent, TextContent, ThinkingContent

__all__ = [
    "TOOL_MARK",
    "event_line",
    "markdown",
    "step_line",
    "transcript",
]

# Rendered agy tool runs are thinking blocks that start with this mark (see assembler).
TOOL_MARK = "▸ "

_DIM, _BOLD, _RED, _CYAN, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[0m"


def event_line(event: AssistantMessageEvent) -> str:
    """One pi event as a JSON line in pi's camelCase, without `partial`."""
    return json.dumps(event.to_json(include_partial=False), ensure_ascii=False)


def step_line(step: Step) -> str:
    """One normalized step as a JSON line (the `replay --format steps` shape)."""
    return json.dumps(step.to_json(), ensure_ascii=False)


def _usage_text(message: AssistantMessage) -> str:
    u = message.usage
    return f"{u.input} in · {u.cache_read} cached · {u.output} out · {u.total_tokens} total tokens"


def transcript(
    turns: Iterable[tuple[int, str, AssistantMessage]], *, colour: bool = False, title: str = ""
) -> Iterator[str]:
    """Lines for people: the prompt, thinking dimmed, tool runs, the answer, usage, errors."""

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if colour and text else text

    if title:
        yield paint(_BOLD, title)
        yield ""
    for number, user_text, message in turns:
        yield paint(_BOLD, f"── turn {number} " + "─" * 40)
        if user_text:
            yield paint(_CYAN, "› " + user_text.replace("\n", "\n  "))
            yield ""
        for block in message.content:
            if isinstance(block, ThinkingContent):
                for line in block.thinking.rstrip("\n").split("\n"):
                    yield paint(_DIM, line if line.startswith((TOOL_MARK, "  ")) else "┆ " + line)
                yield ""
            elif isinstance(block, TextContent):
                yield block.text
                yield ""
        if message.error_message:
            yield paint(_RED, f"✗ {message.error_message}")
        yield paint(_DIM, f"[{message.model} · {message.stop_reason} · {_usage_text(message)}]")
        yield ""


def markdown(turns: Sequence[tuple[int, str, AssistantMessage]], *, title: str = "") -> str:
    """A shareable Markdown document of the turns."""
    out = [f"# {title or 'agy conversation'}", ""]
    for number, user_text, message in turns:
        out += [f"## Turn {number}", ""]
        if user_text:
            out += ["**User:**", "", *("> " + line for line in user_text.split("\n")), ""]
        out += [f"**agy** ({message.model}):", ""]
        for block in message.content:
            if isinstance(block, ThinkingContent):
                text = block.thinking.rstrip("\n")
                if text.startswith(TOOL_MARK):
                    out += ["```text", text, "```", ""]
                else:
                    out += [
                        "<details><summary>Thinking</summary>",
                        "",
                        text,
                        "",
                        "</details>",
                        "",
                    ]
            elif isinstance(block, TextContent):
                out += [block.text, ""]
        if message.error_message:
            out += [f"> **Error:** {message.error_message}", ""]
        out += [f"*{message.stop_reason} · {_usage_text(message)}*", ""]
    return "\n".join(out)
