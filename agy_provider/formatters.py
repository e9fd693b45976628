"""Render replayed or live turns for machines (JSON lines) and people (transcript, markdown).

Pure string builders; the CLI decides where the text goes and whether colour is on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

from agy_provider.agy.step import Step
from agy_provider.events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
)
from agy_provider.types import AssistantMessage, TextContent, ThinkingContent

__all__ = [
    "TOOL_MARK",
    "LivePrinter",
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


def markdown(
    turns: Iterable[tuple[int, str, AssistantMessage]], *, title: str = ""
) -> Iterator[str]:
    """A shareable Markdown document of the turns, line by line."""
    yield f"# {title or 'agy conversation'}"
    yield ""
    for number, user_text, message in turns:
        yield f"## Turn {number}"
        yield ""
        if user_text:
            yield "**User:**"
            yield ""
            yield from ("> " + line for line in user_text.split("\n"))
            yield ""
        yield f"**agy** ({message.model}):"
        yield ""
        for block in message.content:
            if isinstance(block, ThinkingContent):
                text = block.thinking.rstrip("\n")
                if text.startswith(TOOL_MARK):
                    yield from ("```text", text, "```", "")
                else:
                    yield from (
                        "<details><summary>Thinking</summary>",
                        "",
                        text,
                        "",
                        "</details>",
                        "",
                    )
            elif isinstance(block, TextContent):
                yield from (block.text, "")
        if message.error_message:
            yield from (f"> **Error:** {message.error_message}", "")
        yield f"*{message.stop_reason} · {_usage_text(message)}*"
        yield ""


class LivePrinter:
    """Writes a streaming turn for people as its events arrive: thinking dimmed, tool runs as
    their one-line summaries, the answer as plain text, and the error or usage at the end."""

    def __init__(self, write: Callable[[str], object], *, colour: bool = False) -> None:
        self._write = write
        self._colour = colour
        self._at_line_start = True

    def _paint(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self._colour and text else text

    def _out(self, text: str) -> None:
        if text:
            self._write(text)
            self._at_line_start = text.endswith("\n")

    def _newline(self) -> None:
        if not self._at_line_start:
            self._out("\n")

    def feed(self, event: AssistantMessageEvent) -> None:
        if isinstance(event, (ThinkingStartEvent, TextStartEvent)):
            self._newline()
        elif isinstance(event, ThinkingDeltaEvent):
            self._out(self._paint(_DIM, event.delta))
        elif isinstance(event, TextDeltaEvent):
            self._out(event.delta)
        elif isinstance(event, (ThinkingEndEvent, TextEndEvent)):
            self._newline()
        elif isinstance(event, ErrorEvent):
            self._newline()
            self._out(self._paint(_RED, f"✗ {event.error.error_message}") + "\n")
        elif isinstance(event, DoneEvent):
            self._newline()
            message = event.message
            self._out(self._paint(_DIM, f"[{message.model} · {_usage_text(message)}]") + "\n")
