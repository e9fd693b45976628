"""What one stdin line means to a persistent agy (`--input-format stream-json`, AGY-FORMATS §2.4).

Owns `read_input_line`: a line → a `UserTurn`, a `Skipped` line (with agy's warning, if any) or a
`Refused` one (the `result` error and exit code that end the process). No I/O here.

The table (agy ≥ 1.1.15; 1.1.14 keyed turns by `type`, and skipped what it could not read):
- `{"event":"user","message":{"content": "<text>" | [{"type":"text","text":…}, …]}}` (`role`
  optional) is one turn; the text blocks are joined.
- an unknown `event` → skipped with `warning: ignoring unsupported stream input message event
  "<event>"` (written on stderr, as §2.4 documents; §2.2 saw the same line on stdout).
- `control_request` / `control_response`, and (1.1.18+, which answers slash commands itself)
  a message that is a CLI slash command (`/usage`, `/model …`, `/config`, `/effort …`) → exit 2.
  Any other `/name args` is a skill: an ordinary turn.
- invalid JSON, a missing `event` or `message`, no content, a block that is not text, or a value
  of the wrong type → exit 1. The wordings `stream input message is missing the "event" field`,
  `… "message" field` and `stream input message has no content` are agy's (§2.2, §2.4); the
  others follow Go's `encoding/json` and are unverified.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agy_provider.sim.commands import cli_command
from agy_provider.sim.versions import AgyVersion

__all__ = ["Refused", "Skipped", "UserTurn", "read_input_line"]

_CONTROL_EVENTS = frozenset({"control_request", "control_response"})


@dataclasses.dataclass(frozen=True, slots=True)
class UserTurn:
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Skipped:
    """A line agy passes over; `warning` (may be empty) is what it says on stderr."""

    warning: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """A line that ends the process with a `result` ERROR `error` and exit `exit_code`."""

    error: str
    exit_code: int = 1


def _go_kind(value: Any) -> str:
    """The JSON kind as Go's `cannot unmarshal <kind> into …` names it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _unmarshal(value: Any, into: str) -> Refused:
    return Refused(
        f"failed to parse stream input message: json: cannot unmarshal {_go_kind(value)} into {into}"
    )


def _syntax(text: str, exc: json.JSONDecodeError) -> Refused:
    if exc.pos >= len(text.rstrip()):
        reason = "unexpected end of JSON input"
    else:
        reason = f"invalid character {text[exc.pos]!r} looking for beginning of value"
    return Refused(f"failed to parse stream input message: {reason}")


def _content_text(content: Any) -> str | Refused:
    if content is None:  # JSON null or absent: Go leaves the field empty
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _unmarshal(content, "Go struct field message.content of type []ContentBlock")
    parts = []
    for block in content:
        if not isinstance(block, dict):
            return _unmarshal(block, "Go struct field message.content of type ContentBlock")
        kind = block.get("type")
        if kind != "text":
            return Refused(
                f"stream input message has an unsupported content block type {json.dumps(kind)}:"
                " only text is supported"
            )
        text = block.get("text", "")
        if not isinstance(text, str):
            return _unmarshal(text, "Go struct field ContentBlock.text of type string")
        parts.append(text)
    return "".join(parts)


def _old_line(data: Any) -> UserTurn | Skipped:
    """1.1.8–1.1.14: `{"type":"user",…}` (`event` is taken too); anything else is skipped."""
    if isinstance(data, dict) and "user" in (data.get("type"), data.get("event")):
        message = data.get("message")
        text = _content_text(message.get("content")) if isinstance(message, dict) else None
        if isinstance(text, str) and text:
            return UserTurn(text)
    return Skipped("Error: invalid stream-json input line")


def read_input_line(raw: bytes, version: AgyVersion) -> UserTurn | Skipped | Refused:
    """One stdin line (with or without its newline) as the imitated agy reads it."""
    text = raw.decode("utf-8", "replace")  # Go's decoder replaces invalid UTF-8 the same way
    if not text.strip():
        return Skipped()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return _syntax(text, exc) if version.at_least("1.1.15") else _old_line(None)
    if not version.at_least("1.1.15"):
        return _old_line(data)
    if not isinstance(data, dict):
        return _unmarshal(data, "Go value of type stream.InputMessage")
    event = data.get("event")
    if event is None or event == "":
        return Refused('stream input message is missing the "event" field')
    if not isinstance(event, str):
        return _unmarshal(event, "Go struct field InputMessage.event of type string")
    if event in _CONTROL_EVENTS:
        return Refused(f"unsupported stream input message event {json.dumps(event)}", 2)
    if event != "user":
        return Skipped(
            f"warning: ignoring unsupported stream input message event {json.dumps(event)}"
        )
    message = data.get("message")
    if message is None:
        return Refused('stream input message is missing the "message" field')
    if not isinstance(message, dict):
        return _unmarshal(message, "Go struct field InputMessage.message of type UserMessage")
    content = _content_text(message.get("content"))
    if isinstance(content, Refused):
        return content
    if not content.strip():
        return Refused("stream input message has no content")
    command = cli_command(content) if version.answers_slash_commands else None
    if command is not None:
        return Refused(f'slash command "/{command}" is not supported in stream-json input mode', 2)
    return UserTurn(content)
