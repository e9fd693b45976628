"""One owner per conversation, for every wire API serve speaks: whose request this is (the
client's own signal, strongest first), and what of serve's memory that owner may continue.

The rule, once: a transcript continues only conversations delivered to the same owner; a
request that branches off its main line (other system prompt or tools) gets a conversation of
its own; a parked turn resumes only for its owner; thinking comes back only with our signature.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final

from agy_provider.hosts.serve.ask import ServeAsk
from agy_provider.hosts.serve.ask import session_key
from agy_provider.hosts.serve.ask import user_id_key
from agy_provider.hosts.serve.memory import FOREIGN_THINKING
from agy_provider.hosts.serve.memory import DeliveredMessages
from agy_provider.live.continuity import parse_mark
from agy_provider.live.parking import PARKED
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import ThinkingContent

__all__ = [
    "SESSION_HEADERS",
    "SESSION_PREFIX",
    "Owner",
    "Owners",
    "Placement",
    "ThinkingSigner",
    "fingerprint",
    "owner_of",
]

# Session ids serve gives the provider: a client's key in a namespace of its own, so it never
# names a `chat` or pi host's session.
SESSION_PREFIX: Final = "serve:"
# The headers coding agents name their session in, strongest first: Claude Code's; Codex's and
# pi's (`session_id`, underscore and all); opencode's.
SESSION_HEADERS: Final = ("x-claude-code-session-id", "session_id", "x-opencode-session")
_KEY_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")
# Lines and keys remembered (least recently used go first): as many as the answers memory holds.
_BOUND: Final = 4096
_SIGNATURE_PREFIX: Final = "agy1."


@dataclasses.dataclass(frozen=True, slots=True)
class Owner:
    """Whose request this is: `key` ("" when only the transcript tells) and the signal that
    gave it (`source`: `x-agy-session`, `user`, `metadata.user_id`, a session header's name,
    `prompt_cache_key`, `previous_response_id`, or `transcript`)."""

    key: str = ""
    source: str = "transcript"

    @property
    def session_id(self) -> str:
        """The provider's session id for this owner ("" for none)."""
        return SESSION_PREFIX + self.key if self.key else ""


def _loose_key(value: str) -> str:
    """A key from a signal the client did not choose for us (a header, a cache key): kept when
    it is a valid key, else its digest (never refused: the request is fine without it)."""
    if _KEY_CHARS.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def owner_of(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    responses: Mapping[str, str] | None = None,
) -> Owner:
    """The request's owner from the client's own signal, strongest first: an explicit key
    (`x-agy-session`, `user`, `metadata.user_id` — plain or Claude Code's JSON), a session
    header (`SESSION_HEADERS`), `prompt_cache_key`, `previous_response_id` (the owner of that
    response, from `responses`); else the transcript alone. Raises `serve/convert.RequestError`
    for an explicit key that cannot be one."""
    pinned = headers.get("x-agy-session")
    if pinned:
        return Owner(session_key(pinned, "x-agy-session"), "x-agy-session")
    user = body.get("user")
    if isinstance(user, str) and user:
        return Owner(session_key(user, "user"), "user")
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        key, field = user_id_key(metadata.get("user_id"), "metadata.user_id")
        if key:
            return Owner(key, field)
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return Owner(_loose_key(value), name)
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        return Owner(_loose_key(cache_key), "prompt_cache_key")
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and responses is not None and previous in responses:
        return Owner(responses[previous], "previous_response_id")
    return Owner()


class ThinkingSigner:
    """Signatures for the thinking blocks serve hands out: an HMAC (a secret of this server) of
    the owner's key and the thinking, so a block sent back is ours, unedited, and its owner's —
    or it is not ours (forged, edited, another owner's, another server's)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def sign(self, key: str, thinking: str) -> str:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        mac.update(key.encode("utf-8", "surrogatepass") + b"\0")
        mac.update(thinking.encode("utf-8", "surrogatepass"))
        return _SIGNATURE_PREFIX + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def verify(self, key: str, thinking: str, signature: object) -> bool:
        if not isinstance(signature, str) or not signature.startswith(_SIGNATURE_PREFIX):
            return False
        return hmac.compare_digest(signature, self.sign(key, thinking))


def fingerprint(context: Context) -> str:
    """What tells a conversation's line from a side request branching off it: the system
    prompt and the tools offered (a background request of a coding agent differs in them)."""
    tools = sorted(
        (t.name, t.description, json.dumps(t.parameters, sort_keys=True, default=str))
        for t in context.tools or ()
    )
    seen = json.dumps([context.system_prompt or "", tools], ensure_ascii=False)
    return hashlib.sha256(seen.encode("utf-8", "surrogatepass")).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Where a request's turn goes: the transcript it runs with (our answers restored where its
    owner may continue them), the owner key its session is named by ("" for none), the
    conversation it is expected to continue ("" for a new one), whether it is a side request,
    whether its tool results resume a parked turn, and whether they must not (`no_resume`)."""

    messages: tuple[Message, ...]
    session_key: str
    expected: str = ""
    side: bool = False
    resuming: bool = False
    no_resume: bool = False
    fingerprint: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class _Line:
    owner: str
    fingerprint: str


class Owners:
    """The ownership rule's memory: each conversation's owner and line (its fingerprint), each
    owner key's main conversation, the owners of responses (`previous_response_id`), and the
    signer of thinking. Thread-safe, bounded; in memory (a restart forgets it, as the answers)."""

    def __init__(self, delivered: DeliveredMessages, signer: ThinkingSigner | None = None) -> None:
        self.delivered = delivered
        self.signer = signer or ThinkingSigner()
        self._lock = threading.Lock()
        self._lines: OrderedDict[str, _Line] = OrderedDict()
        self._mains: OrderedDict[str, str] = OrderedDict()
        self.responses: OrderedDict[str, str] = OrderedDict()

    def place(self, ask: ServeAsk, owner: Owner) -> Placement:
        """Where `ask`'s turn goes for `owner` (see `Placement`)."""
        messages = self._verified(ask.context.messages, owner.key)
        restored = self.delivered.restore(messages, owner.key)
        conversation = _newest_conversation(restored)
        line_print = fingerprint(ask.context)
        with self._lock:
            if not conversation and owner.key:
                conversation = self._mains.get(owner.key, "")
            line = self._lines.get(conversation) if conversation else None
        if line is None and owner.key:
            # A conversation nobody's key owns yet (its client sent none) is claimed by the
            # first key that continues it; from then on it is that key's.
            claimed = self.delivered.restore(messages, "")
            unowned = _newest_conversation(claimed)
            with self._lock:
                line = self._lines.get(unowned) if unowned else None
            if line is not None and not line.owner:
                restored, conversation = claimed, unowned
                line = _Line(owner.key, line.fingerprint)
            else:
                line = None
        if line is not None and line.owner != owner.key:
            # Never another owner's: the restore is per owner already; this holds it if not.
            return Placement(messages, owner.key, fingerprint=line_print, no_resume=True)
        resuming, no_resume = self._parked(restored, owner)
        if line is not None and line.fingerprint != line_print and not resuming:
            # A side request: the main line keeps its conversation, this one gets its own
            # carrying the history (plain: no marks, no session, no parked turn). Results for
            # the owner's own parked call are never one: that turn waits for them.
            return Placement(messages, "", side=True, no_resume=True, fingerprint=line_print)
        return Placement(
            restored,
            owner.key,
            expected=conversation,
            resuming=resuming,
            no_resume=no_resume,
            fingerprint=line_print,
        )

    def settled(self, owner: Owner, placement: Placement, message: AssistantMessage) -> None:
        """`message` was delivered for `placement`: its conversation is `owner`'s line."""
        mark = parse_mark(message.response_id)
        if mark is None:
            return
        conversation = mark[0]
        with self._lock:
            self._lines[conversation] = _Line(owner.key, placement.fingerprint)
            self._lines.move_to_end(conversation)
            if owner.key and not placement.side:
                self._mains[owner.key] = conversation
                self._mains.move_to_end(owner.key)
            for table in (self._lines, self._mains, self.responses):
                while len(table) > _BOUND:
                    table.popitem(last=False)

    def remember_response(self, response_id: str, owner: Owner) -> None:
        """A response id handed out (Responses API): a request naming it as
        `previous_response_id` is `owner`'s."""
        if not owner.key:
            return
        with self._lock:
            self.responses[response_id] = owner.key
            while len(self.responses) > _BOUND:
                self.responses.popitem(last=False)

    def sign(self, owner: Owner, thinking: str) -> str:
        return self.signer.sign(owner.key, thinking)

    def _verified(self, messages: Sequence[Message], key: str) -> tuple[Message, ...]:
        """`messages` with each thinking block checked: ours (signed for this owner, or for no
        key: what any holder of that transcript may claim) loses its signature, anything else
        is marked foreign (`FOREIGN_THINKING`). A client's signature never reaches the
        provider, so it can never name a conversation."""
        out: list[Message] = []
        for message in messages:
            if isinstance(message, AssistantMessage) and any(
                isinstance(b, ThinkingContent) for b in message.content
            ):
                content = tuple(
                    dataclasses.replace(
                        b,
                        thinking_signature=None if self._ours(key, b) else FOREIGN_THINKING,
                    )
                    if isinstance(b, ThinkingContent)
                    else b
                    for b in message.content
                )
                message = dataclasses.replace(message, content=content)
            out.append(message)
        return tuple(out)

    def _ours(self, key: str, block: ThinkingContent) -> bool:
        signature = block.thinking_signature
        return self.signer.verify(key, block.thinking, signature) or (
            bool(key) and self.signer.verify("", block.thinking, signature)
        )

    @staticmethod
    def _parked(restored: Sequence[Message], owner: Owner) -> tuple[bool, bool]:
        """(resuming, no_resume): whether the trailing tool results resume a parked turn of
        this owner; a client without a key must also show the call it answers is one serve
        delivered to it (its transcript restored up to it), or it resumes nothing."""
        found = PARKED.find(restored, owner.session_id)
        if found is None:
            return False, False
        if owner.key:
            return True, False
        position = len(restored) - 1
        while position >= 0 and not isinstance(restored[position], AssistantMessage):
            position -= 1
        holder = restored[position] if position >= 0 else None
        proven = isinstance(holder, AssistantMessage) and parse_mark(holder.response_id)
        return (True, False) if proven else (False, True)


def _newest_conversation(messages: Sequence[Message]) -> str:
    """The conversation of the newest answer serve delivered in `messages` ("" for none)."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            mark = parse_mark(message.response_id)
            if mark is not None:
                return mark[0]
    return ""
