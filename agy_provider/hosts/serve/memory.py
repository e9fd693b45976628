"""serve's memory of delivered answers: each assistant message as a client of either API sees it
(its text and tool calls, after the transcript before it) mapped, per owner, to the message the
provider delivered, marks intact, so a resent transcript proves its agy conversation to its
owner only. In memory, bounded; a restart forgets it (then a new conversation carries history).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Message
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import ThinkingContent
from agy_provider.pi.types import ToolCall
from agy_provider.pi.types import ToolResultMessage

__all__ = ["DELIVERED_BOUND", "FOREIGN_THINKING", "DeliveredMessages", "visible_text"]

# How many delivered assistant messages the server remembers (least recently used go first):
# each is one conversation's newest answer at most a few times over, so a few thousand cover
# every client a loopback server has, at the size of their answers.
DELIVERED_BOUND = 4096
# The signature a client's thinking block is given when its own did not verify
# (`serve/owners`): not ours, so its text counts as what the client sees and the transcript
# no longer matches any answer serve delivered.
FOREIGN_THINKING = "serve:foreign-thinking"


def visible_text(message: AssistantMessage) -> str:
    """The answer's text as both APIs hand it out: every text block, joined."""
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def _visible(message: Message) -> Any:
    """What a client of either API keeps of `message` (never thinking, signatures or marks)."""
    if isinstance(message, AssistantMessage):
        calls = [
            [c.id, c.name, json.dumps(c.arguments, sort_keys=True, ensure_ascii=False)]
            for c in message.content
            if isinstance(c, ToolCall)
        ]
        foreign = [
            c.thinking
            for c in message.content
            if isinstance(c, ThinkingContent) and c.thinking_signature == FOREIGN_THINKING
        ]
        return ["assistant", visible_text(message).strip(), calls, *foreign]
    if isinstance(message, ToolResultMessage):
        return [
            "tool",
            message.tool_call_id,
            "".join(getattr(c, "text", "") for c in message.content),
        ]
    content = message.content
    if isinstance(content, str):
        return ["user", content]
    return [
        "user",
        [
            c.text if isinstance(c, TextContent) else hashlib.sha256(c.data.encode()).hexdigest()
            for c in content
        ],
    ]


def _owner_seed(owner: str) -> bytes:
    """Where an owner's chain of digests starts: the same transcript under two owners is two
    keys, so one owner's resent transcript never finds another's answers."""
    return hashlib.sha256(b"owner\0" + owner.encode("utf-8", "surrogatepass")).digest()


def _chain(previous: bytes, message: Message) -> bytes:
    line = json.dumps(_visible(message), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(previous + line).digest()


class DeliveredMessages:
    """Delivered answers by the digest of the transcript a client sees up to and including them.

    A transcript that a client resends carries our answers without their marks; `restore` puts
    back the delivered message wherever the transcript up to it is one we answered, so the
    provider's own continuity (`live/continuity.find_continuation`) proves the conversation.
    Keying by the whole transcript, not the answer alone, keeps two conversations whose answers
    happen to be word for word the same apart. Thread-safe; bounded (`DELIVERED_BOUND`, least
    recently used first).
    """

    def __init__(self, bound: int = DELIVERED_BOUND) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._known: OrderedDict[bytes, AssistantMessage] = OrderedDict()

    def __len__(self) -> int:
        return len(self._known)

    def remember(
        self, transcript: Sequence[Message], delivered: AssistantMessage, owner: str = ""
    ) -> None:
        """`delivered` answered `transcript` (as the client sent it, before `restore`), for
        `owner` (its key, "" for a client known by its transcript alone)."""
        digest = _owner_seed(owner)
        for message in transcript:
            digest = _chain(digest, message)
        key = _chain(digest, delivered)
        with self._lock:
            self._known[key] = delivered
            self._known.move_to_end(key)
            while len(self._known) > self._bound:
                self._known.popitem(last=False)

    def restore(self, messages: Sequence[Message], owner: str = "") -> tuple[Message, ...]:
        """`messages` with every assistant message we delivered to `owner` replaced by the
        delivered one (another owner's answers stay plain history)."""
        out: list[Message] = []
        digest = _owner_seed(owner)
        for message in messages:
            digest = _chain(digest, message)
            if isinstance(message, AssistantMessage):
                with self._lock:
                    found = self._known.get(digest)
                    if found is not None:
                        self._known.move_to_end(digest)
                if found is not None:
                    message = found
            out.append(message)
        return tuple(out)
