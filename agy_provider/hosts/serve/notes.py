"""serve's mid-conversation system messages (Anthropic `role: "system"` inside `messages`, as
Claude Code sends them): each becomes marked text at its own place in the user's side of the
transcript, since agy takes one system prompt, before everything.
"""

from __future__ import annotations

import dataclasses

from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import UserContent
from agy_provider.pi.types import UserMessage

__all__ = ["place_notes", "system_note", "user_content"]


def system_note(text: str) -> TextContent:
    """A system message sent mid-conversation, as text at its place in the transcript: marked
    the way Claude Code marks such notes itself when an API refuses `role: "system"`."""
    return TextContent(text=f"<system-reminder>\n{text}\n</system-reminder>")


def place_notes(messages: list[Message], notes: list[UserContent]) -> None:
    """System notes with no user message after them: at the end of the user message before
    them, else as a user message of their own, so each keeps its place."""
    if not notes:
        return
    if messages and isinstance(messages[-1], UserMessage):
        messages[-1] = dataclasses.replace(
            messages[-1], content=[*user_content(messages[-1]), *notes]
        )
    else:
        messages.append(UserMessage(content=list(notes), timestamp=0))
    notes.clear()


def user_content(message: Message) -> list[UserContent]:
    assert isinstance(message, UserMessage)
    content = message.content
    return [TextContent(text=content)] if isinstance(content, str) else list(content)
