"""Conversations a host never has to manage: the mark on each assistant message we return, and
the proof that a stateless host's transcript continues the agy conversation that mark names.

Pure: messages and records in, a decision out. The turn reads and writes the records
(`sessions.SessionStore`, under `conversation_key`); nothing here touches a file or a clock.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from collections.abc import Sequence

from agy_provider.live.prompt import history_digest
from agy_provider.pi.types import AssistantContent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.store.sessions import SessionRecord

__all__ = [
    "MARK_PREFIX",
    "Continuation",
    "conversation_key",
    "find_continuation",
    "make_mark",
    "mark_message",
    "parse_mark",
]

# `agy-provider:1:<conversation id>:<token>`: the version lets a later format coexist; the token
# (random, one per delivered message) is what a record accepts, so two hosts whose transcripts
# are word for word the same still carry different marks.
MARK_PREFIX = "agy-provider:1:"
_MARK = re.compile(
    re.escape(MARK_PREFIX) + r"([A-Za-z0-9][A-Za-z0-9-]{0,127}):([0-9a-f]{32})"
)
# The records of conversations continued by mark share the session store with host sessions.
_KEY_PREFIX = "conv:"


def conversation_key(conversation_id: str) -> str:
    """The store key of the record that proves marks of `conversation_id`."""
    return _KEY_PREFIX + conversation_id


def make_mark(conversation_id: str, token: str) -> str:
    return f"{MARK_PREFIX}{conversation_id}:{token}"


def parse_mark(value: object) -> tuple[str, str] | None:
    """(conversation id, token) of a mark, or None for anything else (another provider's id)."""
    if not isinstance(value, str):
        return None
    match = _MARK.fullmatch(value)
    return (match[1], match[2]) if match else None


def mark_message(message: AssistantMessage, mark: str) -> AssistantMessage:
    """`message` carrying `mark` in every field pi keeps for provider state.

    pi-ai-python and pi-ai-client keep `responseId`; pi-agent-core and pi-agents-py have no such
    field but keep the text, thinking and tool-call signatures. A host that keeps any of them
    carries the mark back.
    """
    content: list[AssistantContent] = []
    for block in message.content:
        if isinstance(block, TextContent):
            content.append(dataclasses.replace(block, text_signature=mark))
        elif isinstance(block, ThinkingContent):
            content.append(dataclasses.replace(block, thinking_signature=mark))
        elif isinstance(block, ToolCall):
            content.append(dataclasses.replace(block, thought_signature=mark))
        else:
            content.append(block)
    return dataclasses.replace(message, content=tuple(content), response_id=mark)


def _mark_of(message: AssistantMessage) -> tuple[str, str] | None:
    carriers: list[object] = [message.response_id]
    for block in message.content:
        if isinstance(block, TextContent):
            carriers.append(block.text_signature)
        elif isinstance(block, ThinkingContent):
            carriers.append(block.thinking_signature)
        elif isinstance(block, ToolCall):
            carriers.append(block.thought_signature)
    for carrier in carriers:
        parsed = parse_mark(carrier)
        if parsed is not None:
            return parsed
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Continuation:
    """What the transcript proves: the conversation it continues (or "" with `why` not), the
    record that proved it, and the messages agy never saw, between its last reply and the
    newest input."""

    conversation_id: str = ""
    record: SessionRecord | None = None
    unseen: tuple[Message, ...] = ()
    why: str = ""

    @property
    def proven(self) -> bool:
        return bool(self.conversation_id)


def find_continuation(
    earlier: Sequence[Message], lookup: Callable[[str], SessionRecord | None]
) -> Continuation:
    """Which conversation `earlier` (the transcript before the newest input) continues.

    The newest assistant message bearing our mark decides: its conversation's record
    (`lookup(conversation_key(id))`) must accept the mark's token, and the transcript up to and
    including that message must be what the record saw (`history_digest`). An older mark is
    accepted only where every turn since it failed or was aborted (the host may have dropped
    those messages). What follows the marked message is what agy never saw (another provider's
    turns, a compaction summary, tool results, more user messages). No proof, no continuation:
    `why` says what was missing.
    """
    for position in range(len(earlier) - 1, -1, -1):
        message = earlier[position]
        if not isinstance(message, AssistantMessage):
            continue
        mark = _mark_of(message)
        if mark is None:
            continue
        conversation_id, token = mark
        record = lookup(conversation_key(conversation_id))
        if record is None or record.conversation_id != conversation_id:
            return Continuation(
                why=f"no record of conversation {conversation_id} (another machine or store?)"
            )
        if token == record.mark:
            expected = record.history_digest
        elif token == record.answered_mark:
            expected = record.answered_digest
        else:
            return Continuation(
                why=f"the transcript's last agy message is not conversation "
                f"{conversation_id}'s newest (the host went back to an earlier point)"
            )
        if history_digest(earlier[: position + 1]) != expected:
            return Continuation(
                why=f"the transcript before agy's last message differs from what conversation "
                f"{conversation_id} saw (rewritten, compacted or edited)"
            )
        return Continuation(
            conversation_id=conversation_id,
            record=record,
            unseen=tuple(earlier[position + 1 :]),
        )
    if any(isinstance(m, AssistantMessage) for m in earlier):
        return Continuation(why="no assistant message in the transcript bears agy-provider's mark")
    return Continuation(why="the transcript has no earlier answer")
