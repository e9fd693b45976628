"""Render replayed or live turns for machines (JSON lines) and people (transcript, markdown).

Pure string builders; the CLI decides where the text goes and whether colour is on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import Final

from agy_provider.agy.step import Step
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import TextDeltaEvent
from agy_provider.pi.events import TextEndEvent
from agy_provider.pi.events import TextStartEvent
from agy_provider.pi.events import ThinkingDeltaEvent
from agy_provider.pi.events import ThinkingEndEvent
from agy_provider.pi.events import ThinkingStartEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent

__all__ = [
    "TOOL_MARK",
    "LivePrinter",
    "event_line",
    "json_line",
    "markdown",
    "printable",
    "step_line",
    "transcript",
]

# Rendered agy tool runs are thinking blocks that start with this mark (see assembler).
TOOL_MARK = "▸ "

_DIM, _BOLD, _RED, _CYAN, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[0m"


# Text from a file or from agy must not drive the terminal it is printed on: C0 controls but
# tab and newline (ESC starts every escape sequence; BEL, BS and CR rewrite what is shown), DEL,
# and C1 controls (U+009B is a one-character CSI on terminals that honour 8-bit controls).
_CONTROLS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# json.dumps escapes C0 controls itself; with ensure_ascii=False it leaves DEL and C1 raw, and
# U+2028/U+2029, which are valid JSON but end a line for str.splitlines() and for JavaScript:
# escaped, each JSON line is one line for every reader.
_JSON_RAW_CONTROLS: Final = re.compile("[\x7f-\x9f\u2028\u2029]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # U+2400 CONTROL PICTURES: ␛ for ESC, ␇ for BEL, …
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def printable(text: str) -> str:
    """`text` safe to show on a terminal: control characters become visible symbols.

    Tabs and newlines stay; ESC, BEL, backspace, CR and the rest of C0, DEL and C1 become
    their Unicode control pictures (`␛`) or `<U+009B>`, so a file can neither run escape
    sequences nor hide text. Text without controls comes back as itself.
    """
    return _CONTROLS.sub(_picture, text) if _CONTROLS.search(text) else text


def _json_line(value: Any) -> str:
    """Strict JSON in one line: never NaN or Infinity; DEL, C1, U+2028/U+2029 escaped like C0."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a non-finite float in tool arguments: JSON has no spelling for it
        text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False)
    if _JSON_RAW_CONTROLS.search(text):
        text = _JSON_RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_line(value: Any) -> str:
    """Any JSON value as one strict line (as event and step lines are written)."""
    return _json_line(value)


def event_line(event: AssistantMessageEvent) -> str:
    """One pi event as a JSON line in pi's camelCase, without `partial`."""
    return _json_line(event.to_json(include_partial=False))


def step_line(step: Step) -> str:
    """One normalized step as a JSON line (the `replay --format steps` shape)."""
    return _json_line(step.to_json())


def _usage_text(message: AssistantMessage) -> str:
    u = message.usage
    return f"{u.input} in · {u.cache_read} cached · {u.output} out · {u.total_tokens} total tokens"


def transcript(
    turns: Iterable[tuple[int, str, AssistantMessage]], *, colour: bool = False, title: str = ""
) -> Iterator[str]:
    """Lines for people: the prompt, thinking dimmed, tool runs, the answer, usage, errors.

    Every text from the recording goes through `printable`: only our own colour codes reach
    the terminal.
    """

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if colour and text else text

    if title:
        yield paint(_BOLD, printable(title))
        yield ""
    for number, user_text, message in turns:
        yield paint(_BOLD, f"── turn {number} " + "─" * 40)
        if user_text:
            yield paint(_CYAN, "› " + printable(user_text).replace("\n", "\n  "))
            yield ""
        for block in message.content:
            if isinstance(block, ThinkingContent):
                for line in printable(block.thinking.rstrip("\n")).split("\n"):
                    yield paint(_DIM, line if line.startswith((TOOL_MARK, "  ")) else "┆ " + line)
                yield ""
            elif isinstance(block, TextContent):
                yield printable(block.text)
                yield ""
        if message.error_message:
            yield paint(_RED, f"✗ {printable(message.error_message)}")
        model = printable(message.model)
        yield paint(_DIM, f"[{model} · {message.stop_reason} · {_usage_text(message)}]")
        yield ""


def markdown(
    turns: Iterable[tuple[int, str, AssistantMessage]], *, title: str = ""
) -> Iterator[str]:
    """A shareable Markdown document of the turns, line by line.

    Text from the recording goes through `printable` (a document is often read on a terminal)
    and code fences are longer than any run of backticks inside them, so no content can close
    one early.
    """
    heading = printable(title or "agy conversation").replace("\n", " ")
    yield f"# {heading}"
    yield ""
    for number, user_text, message in turns:
        yield f"## Turn {number}"
        yield ""
        if user_text:
            yield "**User:**"
            yield ""
            yield from ("> " + line for line in printable(user_text).split("\n"))
            yield ""
        yield f"**agy** ({printable(message.model)}):"
        yield ""
        for block in message.content:
            if isinstance(block, ThinkingContent):
                text = printable(block.thinking.rstrip("\n"))
                if text.startswith(TOOL_MARK):
                    fence = "`" * max(3, _longest_backtick_run(text) + 1)
                    yield from (fence + "text", text, fence, "")
                else:
                    # Thinking that says "</details>" must not close our block early.
                    inner = _CLOSE_DETAILS.sub(lambda m: "&lt;" + m.group()[1:], text)
                    yield from (
                        "<details><summary>Thinking</summary>",
                        "",
                        inner,
                        "",
                        "</details>",
                        "",
                    )
            elif isinstance(block, TextContent):
                yield from (printable(block.text), "")
        if message.error_message:
            error = printable(message.error_message).replace("\n", "\n> ")
            yield from (f"> **Error:** {error}", "")
        yield f"*{message.stop_reason} · {_usage_text(message)}*"
        yield ""


_CLOSE_DETAILS: Final = re.compile("</details", re.IGNORECASE)


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall("`+", text)), default=0)


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
            self._out(self._paint(_DIM, printable(event.delta)))
        elif isinstance(event, TextDeltaEvent):
            self._out(printable(event.delta))
        elif isinstance(event, (ThinkingEndEvent, TextEndEvent)):
            self._newline()
        elif isinstance(event, ErrorEvent):
            self._newline()
            self._out(self._paint(_RED, f"✗ {printable(event.error.error_message or '')}") + "\n")
        elif isinstance(event, DoneEvent):
            self._newline()
            message = event.message
            model = printable(message.model)
            self._out(self._paint(_DIM, f"[{model} · {_usage_text(message)}]") + "\n")
