"""What agy is told: the newest user message, or a byte-stable preamble of the host's history.

Pure: a context in, a prompt (and the history's fingerprint, which decides whether to resume) out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from agy_provider.errors import UsageError
from agy_provider.live.images import check_images
from agy_provider.live.images import image_lines
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage

__all__ = ["build_prompt", "history_digest"]


def _text_of(message: Message) -> str:
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return content
        return "".join(block.text for block in content if isinstance(block, TextContent))
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def history_digest(messages: Sequence[Message]) -> str:
    """A fingerprint of a conversation's user/assistant/tool texts (thinking is not history)."""
    canonical = [[type(m).__name__, _text_of(m)] for m in messages]
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False).encode()).hexdigest()


def build_prompt(
    context: Context,
    *,
    resume: bool,
    unseen: Sequence[Message] = (),
    image_paths: Sequence[str] | None = None,
) -> str:
    """The newest user message; for a new conversation, one compact preamble before it.

    A resumed conversation gets only the newest input, after `unseen` — the messages since agy's
    last reply that agy never saw (another model's turns, a compaction summary, tool results,
    more user messages) — as one labelled block. The preamble and the block are pure functions of
    the context, so the same history gives the same bytes and agy's prompt cache keeps working.
    The newest message's images are checked (`UsageError` for a bad one); with `image_paths`
    (where they were staged, `images.ImageStaging`) the message ends with one line per image
    asking agy to view that file.
    """
    messages = list(context.messages)
    if not messages:
        raise UsageError("the context has no messages to send")
    newest = messages[-1]
    if isinstance(newest, ToolResultMessage):
        # Results for tool calls of a turn that is no longer waiting for them (agy exited, or
        # this process is not the one that ran it): they are the newest input, and the history
        # before them (with the calls) goes in the preamble.
        first = len(messages)
        while first > 0 and isinstance(messages[first - 1], ToolResultMessage):
            first -= 1
        text = "\n\n".join(_tool_result(m) for m in messages[first:])
        text += "\n\nThese are the results of the host tools you called; continue the task."
        return _with_preamble(context, messages[:first], text, resume=resume, unseen=unseen)
    if not isinstance(newest, UserMessage):
        raise UsageError("the last message must be the user's or tool results")
    images = (
        []
        if isinstance(newest.content, str)
        else [b for b in newest.content if isinstance(b, ImageContent)]
    )
    text = _text_of(newest)
    if images:
        checked = check_images(images)
        if image_paths is not None:
            text = "\n\n".join(part for part in (text, image_lines(checked, image_paths)) if part)
    return _with_preamble(context, messages[:-1], text, resume=resume, unseen=unseen)


# Introduces what a resumed conversation missed; fixed bytes, so agy's prompt cache holds.
_UNSEEN_NOTE = (
    "Messages of this conversation since your last reply that you have not seen (other "
    "models' turns, summaries, tool results, user messages), oldest first:"
)


def _with_preamble(
    context: Context,
    earlier: Sequence[Message],
    text: str,
    *,
    resume: bool,
    unseen: Sequence[Message] = (),
) -> str:
    if resume:
        if not unseen:
            return text
        lines = ["<unseen_messages>", _UNSEEN_NOTE]
        for message in unseen:
            lines.extend(_render(message))
        lines.append("</unseen_messages>")
        return "\n".join(lines) + "\n\n" + text
    parts: list[str] = []
    if context.system_prompt:
        parts.append(f"<system>\n{context.system_prompt}\n</system>")
    if earlier:
        lines = ["<conversation>"]
        for message in earlier:
            lines.extend(_render(message))
        lines.append("</conversation>")
        parts.append("\n".join(lines))
    return "\n\n".join([*parts, text]) if parts else text


def _render(message: Message) -> list[str]:
    """One message of the history, as agy reads it: its role, its text, its tool calls."""
    role = (
        "tool_result"
        if isinstance(message, ToolResultMessage)
        else ("user" if isinstance(message, UserMessage) else "assistant")
    )
    lines = [f"<{role}>\n{_text_of(message)}\n</{role}>"]
    if isinstance(message, AssistantMessage):
        lines.extend(
            f'<tool_call tool="{b.name}">\n'
            f"{json.dumps(dict(b.arguments), ensure_ascii=False, sort_keys=True)}\n"
            "</tool_call>"
            for b in message.content
            if isinstance(b, ToolCall)
        )
    return lines


def _tool_result(message: Message) -> str:
    assert isinstance(message, ToolResultMessage)
    error = " error" if message.is_error else ""
    return f'<tool_result tool="{message.tool_name}"{error}>\n{_text_of(message)}\n</tool_result>'

