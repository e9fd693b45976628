"""Settling a turn: the mark its final message bears, the session records it leaves, their
save (kept in memory until it lands), the answering model read from agy's records, the bare error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import secrets
import threading
import time
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agy_provider.agy.database import newest_generator_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.rows import decode_generator_record
from agy_provider.agy.rows import model_of_turn
from agy_provider.agy.step import TurnOutcome
from agy_provider.errors import AgyError
from agy_provider.errors import DecodeError
from agy_provider.live.continuity import conversation_key
from agy_provider.live.continuity import make_mark
from agy_provider.live.continuity import mark_message
from agy_provider.live.continuity import parse_mark
from agy_provider.live.prompt import history_digest
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Message
from agy_provider.store.sessions import SessionRecord
from agy_provider.store.sessions import SessionStore
from agy_provider.workers import off_loop

if TYPE_CHECKING:
    from agy_provider.contract.turn import Binding
    from agy_provider.live.turn_edges import Launched

__all__ = [
    "UNSAVED",
    "SessionSave",
    "UnsavedRecords",
    "answering_model",
    "final_message",
    "mark_events",
    "reached_record",
    "read_answering_model",
    "session_records",
    "turn_records",
]

# At most this many of the newest model-call records are looked at for that slug.
_MODEL_RECORDS = 64
# How long reading the answering model's slug from agy's records may take before settling.
_MODEL_READ = 0.5
# How long the session record waits for agy's version (asked beside the turn) before saving.
_VERSION_WAIT = 10.0


class UnsavedRecords:
    """Records of turns whose final event went out before their session was saved, by (store
    path, key): the save runs in a worker thread after `done`, and a turn started meanwhile in
    this process must still resume.

    Each key also remembers the newest turn to settle it: an earlier turn's late save (agy's
    version arriving after the host already ran the next turn) must not overwrite the newer
    record. Records are forgotten from the worker thread that wrote them, hence the lock.
    """

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], SessionRecord] = {}
        self._newest: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def get(self, path: str, key: str) -> SessionRecord | None:
        return self._records.get((path, key))

    def remember(self, path: str, records: Mapping[str, SessionRecord], turn: object) -> None:
        """`turn` is the newest to settle these keys; its records stand until their write lands."""
        with self._lock:
            for key, record in records.items():
                self._records[(path, key)] = record
                self._newest[(path, key)] = turn

    def update(self, path: str, records: Mapping[str, SessionRecord]) -> None:
        with self._lock:
            self._records.update({(path, k): r for k, r in records.items()})

    def newest(
        self, path: str, records: Mapping[str, SessionRecord], turn: object
    ) -> dict[str, SessionRecord]:
        """Those of `records` whose newest turn is still `turn`."""
        return {k: r for k, r in records.items() if self._newest.get((path, k)) is turn}

    def forget(self, keys: Sequence[tuple[str, str]], turn: object) -> None:
        """Forget `keys` (their write landed), unless a newer turn settled them since."""
        with self._lock:
            for key in keys:
                if self._newest.get(key) is turn:
                    self._records.pop(key, None)
                    self._newest.pop(key, None)


# One per process: every turn of the process reads and writes the same store files.
UNSAVED = UnsavedRecords()


async def _written(write: concurrent.futures.Future[None]) -> None:
    """Wait for a worker's write; our cancellation does not cancel the write itself.

    Cancelled (`asyncio.run` ending right after `done` cancels what is left), it still holds
    the loop until the write lands, as the loop's default executor would: a program that reads
    the session file after `asyncio.run` returns finds the turn in it.
    """
    try:
        await asyncio.shield(asyncio.wrap_future(write))
    except asyncio.CancelledError:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.wrap_future(write))
        raise


class SessionSave:
    """One turn's session records: kept in memory before its final event goes out, then written
    off the loop, with agy's version (asked beside the turn) added once it is known."""

    def __init__(self, store: SessionStore, turn: object, memory: UnsavedRecords = UNSAVED) -> None:
        self.store = store
        self.path = str(store.path)
        self.turn = turn
        self.memory = memory

    def keep(self, records: Mapping[str, SessionRecord]) -> None:
        """Kept in memory before the final event goes out, so a turn the host starts right
        after `done` resumes even while the save is still running."""
        self.memory.remember(self.path, records, self.turn)

    async def save(
        self, records: dict[str, SessionRecord], version_task: asyncio.Task[str] | None
    ) -> None:
        path = self.path
        known = version_task is not None and version_task.done() and not version_task.cancelled()
        if known and version_task is not None and version_task.exception() is None:
            version = version_task.result()
            records = {k: dataclasses.replace(r, agy_version=version) for k, r in records.items()}
        self.memory.update(path, records)
        # Written by our pool's threads, which are running already (the loop's default executor
        # would start its threads here, on the loop, and wait for each to run), together with
        # other turns' saves; no thread waits for it. A settle cancelled now (a loop shutting
        # down right after `done`) does not stop the write, and the process finishes it before
        # it exits.
        write = self.store.save_later(records)
        try:
            await _written(write)
            if not known and version_task is not None:
                # agy's version is still being asked (a first run): record it when it comes.
                with contextlib.suppress(TimeoutError, AgyError, OSError):
                    version = await asyncio.wait_for(asyncio.shield(version_task), _VERSION_WAIT)
                    newest = self.memory.newest(path, records, self.turn)
                    if version and newest:
                        records = {
                            k: dataclasses.replace(r, agy_version=version)
                            for k, r in newest.items()
                        }
                        self.memory.update(path, records)
                        write = self.store.save_later(records)
                        await _written(write)
        finally:
            # The records stay readable in memory until their write has landed (a turn started
            # meanwhile in this process resumes from them); a newer turn's record stays until
            # its own write lands.
            keys = [(path, k) for k in records]
            turn, memory = self.turn, self.memory
            write.add_done_callback(lambda _: memory.forget(keys, turn))


def final_message(events: Sequence[AssistantMessageEvent]) -> AssistantMessage | None:
    """The message of the final event among `events` (None when they end in none)."""
    last = events[-1] if events else None
    if isinstance(last, DoneEvent):
        return last.message
    if isinstance(last, ErrorEvent):
        return last.error
    return None


def mark_events(
    events: list[AssistantMessageEvent], conversation_id: str, lost_conversation: str
) -> list[AssistantMessageEvent]:
    """The final event's message bearing the turn's mark (`continuity`): a host that carries it
    back continues the conversation without a session id. Only a turn bound to a conversation
    (`conversation_id`, else "") marks its message; a conversation agy no longer had is said
    there too."""
    if not events or not conversation_id:
        return events
    last = events[-1]
    mark = make_mark(conversation_id, secrets.token_hex(16))
    if isinstance(last, DoneEvent):
        marked = _marked(last.message, mark, conversation_id, lost_conversation)
        return [*events[:-1], dataclasses.replace(last, message=marked)]
    if isinstance(last, ErrorEvent):
        marked = _marked(last.error, mark, conversation_id, lost_conversation)
        return [*events[:-1], dataclasses.replace(last, error=marked)]
    return events


def _marked(
    message: AssistantMessage, mark: str, conversation_id: str, lost_conversation: str
) -> AssistantMessage:
    message = mark_message(message, mark)
    if lost_conversation:
        diagnostic = {
            "type": "agy-provider.conversation_lost",
            "timestamp": int(time.time() * 1000),
            "details": {
                "lost": lost_conversation,
                "conversation": conversation_id,
                "why": "agy no longer has the conversation; a new one carries the history",
            },
        }
        message = dataclasses.replace(
            message, diagnostics=(*(message.diagnostics or ()), diagnostic)
        )
    return message


def reached_record(
    outcome: TurnOutcome,
    *,
    conversation_id: str,
    min_index: int,
    turn_start: int | None,
    last_final: int,
    source_name: str,
) -> SessionRecord | None:
    """The conversation as agy now holds it (None: nothing of this turn reached it).

    `last_final` is the source's last final step index after the turn's history.
    """
    if last_final <= min_index and (outcome.aborted or turn_start is None):
        # Nothing of this turn reached agy's conversation (aborted, or refused before its
        # user step): the session stays as it was, so the host's retry still resumes.
        return None
    return SessionRecord(
        conversation_id=conversation_id,
        last_step_index=last_final,
        event_source=source_name,
        agy_version="",
    )


def session_records(
    *,
    session_id: str,
    conversation_id: str,
    messages: Sequence[Message],
    final: AssistantMessage | None,
    reached: SessionRecord | None,
    previous: SessionRecord | None,
) -> dict[str, SessionRecord]:
    """What to remember after a turn, by store key: the host's session (if it named one) and
    the conversation's own record, which proves the final message's mark. `previous` is the
    record of the conversation the turn continued (read in `prepare`)."""
    records: dict[str, SessionRecord] = {}
    digest = history_digest([*messages, *([final] if final is not None else [])])
    answered = final is not None and final.stop_reason in ("stop", "length", "toolUse")
    if reached is not None and session_id:
        # A session's history leaves out a failed or aborted message (a host may drop it;
        # one that keeps it is recognised by the message's mark below).
        records[session_id] = dataclasses.replace(
            reached,
            history_digest=digest if answered else history_digest(messages),
        )
    mark = parse_mark(final.response_id) if final is not None else None
    if final is None or mark is None or mark[0] != conversation_id:
        return records
    if previous is not None and previous.conversation_id != conversation_id:
        previous = None
    base = reached or previous
    if base is None:
        return records  # nothing of the new conversation reached agy: nothing to continue
    records[conversation_key(conversation_id)] = dataclasses.replace(
        base,
        history_digest=digest,
        mark=mark[1],
        # The newest answer stays acceptable while the turns after it fail or are aborted:
        # a host may drop those messages from its transcript.
        answered_mark=mark[1] if answered else (previous.answered_mark if previous else ""),
        answered_digest=digest if answered else (previous.answered_digest if previous else ""),
    )
    return records


def turn_records(
    launched: Launched,
    outcome: TurnOutcome,
    *,
    final: AssistantMessage | None,
    messages: Sequence[Message],
    previous: SessionRecord | None,
    turn_start: int | None,
) -> dict[str, SessionRecord]:
    """The session records a launched turn leaves (`session_records`), from what its source
    read: `turn_start` is the index of its user step (None: it never got one)."""
    turn, source = launched.handover.turn, launched.handover.source
    assert source is not None  # a launched turn reads one
    # Rows before this turn's user step are history for every later turn, even a row an
    # aborted agy left unfinished: it must not hold the next resume back to it.
    last_final = source.last_final_index(after=-1 if turn_start is None else turn_start)
    reached = reached_record(
        outcome,
        conversation_id=launched.binding.conversation_id,
        min_index=turn.min_index,
        turn_start=turn_start,
        last_final=last_final,
        source_name=launched.handover.name,
    )
    return session_records(
        session_id=turn.session_id,
        conversation_id=launched.binding.conversation_id,
        messages=messages,
        final=final,
        reached=reached,
        previous=previous,
    )


async def read_answering_model(binding: Binding, turn_start: int | None) -> str:
    """`answering_model` in a worker thread, bounded ("" when it fails or takes too long)."""
    with contextlib.suppress(AgyError, TimeoutError):
        return await asyncio.wait_for(
            off_loop(answering_model, binding.path, turn_start), _MODEL_READ
        )
    return ""


def answering_model(path: Path, turn_start: int | None) -> str:
    """The slug of the model that answered the turn starting at `turn_start`, from the newest
    `gen_metadata` records back to the first that belongs to an earlier turn ("" if unknown)."""
    if turn_start is None:
        return ""
    conn = open_conversation_db(path)
    try:
        for seen, (_idx, blob) in enumerate(newest_generator_rows(conn, path=str(path))):
            if seen >= _MODEL_RECORDS:
                return ""  # records that name no steps: do not walk the whole conversation
            try:
                record = decode_generator_record(blob)
            except DecodeError:
                continue
            if record.step_indices and max(record.step_indices) <= turn_start:
                return ""  # an earlier turn's call: this turn recorded none
            if record.model and model_of_turn([record], after=turn_start):
                return record.model
        return ""
    finally:
        conn.close()
