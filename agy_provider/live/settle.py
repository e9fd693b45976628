"""Settling a turn: the session records kept in memory until their save lands, the final
message of the events, the answering model read from agy's records, and the bare error message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Sequence
from pathlib import Path

from agy_provider.agy.database import newest_generator_rows, open_conversation_db
from agy_provider.agy.rows import decode_generator_record, model_of_turn
from agy_provider.errors import DecodeError
from agy_provider.pi.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.pi.types import AssistantMessage, Model
from agy_provider.store.sessions import SessionRecord

__all__ = ["answering_model", "bare_error"]

# At most this many of the newest model-call records are looked at for that slug.
_MODEL_RECORDS = 64


# Records of turns whose final event went out before their session was saved (the save runs in a
# worker thread after `done`): a turn started meanwhile in this process must still resume.
_unsaved: dict[tuple[str, str], SessionRecord] = {}
# The newest turn to settle per session: an earlier turn's late save (agy's version arriving
# after the host already ran the next turn) must not overwrite the newer record.
_newest: dict[tuple[str, str], object] = {}
# Both are forgotten from the worker thread that wrote the record.
_unsaved_lock = threading.Lock()


def _forget_unsaved(keys: Sequence[tuple[str, str]], turn: object) -> None:
    with _unsaved_lock:
        for key in keys:
            if _newest.get(key) is turn:
                _unsaved.pop(key, None)
                _newest.pop(key, None)


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


def _final_message(events: Sequence[AssistantMessageEvent]) -> AssistantMessage | None:
    last = events[-1] if events else None
    if isinstance(last, DoneEvent):
        return last.message
    if isinstance(last, ErrorEvent):
        return last.error
    return None


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


def bare_error(model: Model, message: str) -> AssistantMessage:
    return AssistantMessage(
        content=(),
        api=model.api or "agy",
        provider=model.provider or "agy",
        model=model.id,
        stop_reason="error",
        error_message=message,
        timestamp=0,
    )
