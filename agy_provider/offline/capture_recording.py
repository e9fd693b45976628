"""Load an RPC step capture or a stream-json capture (or `--output-format json`) as a `Recording`.

Owns reading captures in bounded memory: RPC steps read back from the file a turn at a time,
stream-json decoded again, lazily, as each turn is replayed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from collections.abc import Sequence
from typing import IO
from typing import Any

from agy_provider.agy.rpcjson import decode_json_step
from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import TurnOutcome
from agy_provider.agy.streamjson import StreamJsonDecoder
from agy_provider.agy.streamjson import decode_stream_json
from agy_provider.errors import DecodeError
from agy_provider.errors import FramingError
from agy_provider.errors import UsageError
from agy_provider.offline.recording import DEFAULT_MODEL
from agy_provider.offline.recording import Recording
from agy_provider.offline.recording import TurnInput
from agy_provider.offline.recording import Warn
from agy_provider.offline.recording import file_chunks
from agy_provider.offline.recording import guarded_decode
from agy_provider.offline.recording import in_memory_recording
from agy_provider.offline.recording import open_regular
from agy_provider.offline.recording import read_bytes
from agy_provider.offline.recording import short_reason
from agy_provider.offline.recording import split_turns
from agy_provider.wire import jsontext

__all__ = ["load_rpc", "load_stream_json"]


def load_rpc(path: str, warn: Warn) -> Recording:
    handle = open_regular(path)
    try:
        data = read_bytes(handle, path)
        stamp = _stamp(handle)
        # The steps array is located from the document's structure and each step parsed on its
        # own: a bad step is one warning, and memory never holds the whole document parsed.
        spans = jsontext.locate_array(data, "steps")
    except DecodeError as exc:
        handle.close()
        raise UsageError(
            f"{path} is not an agy conversation database, RPC step capture or stream-json "
            f"capture (not JSON: {short_reason(exc)})"
        ) from exc
    except BaseException:
        handle.close()
        raise
    if spans is None:  # an object without a steps array: one step, or a json-format result
        handle.close()
        return _load_rpc_object(path, data, warn)

    def read(position: int, start: int, end: int, *, report: Warn) -> Step | None:
        try:
            raw = jsontext.loads(data_of(start, end), f"step {position}")
        except DecodeError as exc:
            report(f"step {position}: skipped, {short_reason(exc)}")
            return None
        return guarded_decode(
            f"step {position}", functools.partial(decode_json_step, raw, position=position), report
        )

    loaded = data

    def data_of(start: int, end: int) -> bytes:
        if loaded:
            return loaded[start:end]
        if _stamp(handle) != stamp:
            raise UsageError(f"{path} changed while it was being replayed")
        try:
            return os.pread(handle.fileno(), end - start, start)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    # Pass 1: decode every step once (each warning said once), keeping only where the newest
    # step of each index lies, which indexes are user steps, the conversation id and the title.
    where: dict[int, tuple[int, int, int]] = {}
    users: set[int] = set()
    conversation = ""
    titled = (-1, "")
    for position, (start, end) in enumerate(spans):
        step = read(position, start, end, report=warn)
        if step is None:
            continue
        where[step.index] = (position, start, end)
        if step.kind is StepKind.USER:
            users.add(step.index)
        else:
            users.discard(step.index)
        conversation = conversation or step.conversation_id
        if step.kind is StepKind.CHECKPOINT and step.title and step.index >= titled[0]:
            titled = (step.index, step.title)
    del spans, data, loaded  # from here steps are read back from the file, a turn at a time
    loaded = b""
    order = sorted(where)
    starts = [n for n, index in enumerate(order) if index in users]
    if order and not starts:
        starts = [0]
    ends = [*starts[1:], len(order)]

    def silent(_text: str) -> None:
        pass

    def step_at(index: int) -> Step | None:
        position, start, end = where[index]
        return read(position, start, end, report=silent)

    def load_turn(turn: int) -> TurnInput:
        indexes = order[starts[turn] : ends[turn]]
        user = step_at(indexes[0]) if indexes and indexes[0] in users else None
        body = [s for s in map(step_at, indexes[1:] if user else indexes) if s is not None]
        return TurnInput(user=user, batches=[body])

    def iter_steps() -> Iterator[Step]:
        return (s for s in map(step_at, order) if s is not None)

    return Recording(
        format="rpc",
        path=path,
        turn_count=len(starts),
        load_turn=load_turn,
        iter_steps=iter_steps,
        conversation_id=conversation,
        title=titled[1],
        close=handle.close,
    )


def _stamp(handle: IO[bytes]) -> tuple[int, int]:
    info = os.fstat(handle.fileno())
    return info.st_size, info.st_mtime_ns


def _load_rpc_object(path: str, data: bytes, warn: Warn) -> Recording:
    try:
        document: Any = jsontext.loads(data, "the file")
    except DecodeError as exc:
        raise UsageError(
            f"{path} is not an agy conversation database, RPC step capture or stream-json "
            f"capture ({short_reason(exc)})"
        ) from exc
    if isinstance(document, dict) and "num_turns" in document:
        return _load_json_result(path, document)
    if not isinstance(document, dict) or "type" not in document:
        raise UsageError(f'{path} has no steps list (expected {{"steps": [...]}} or a bare list)')
    step = guarded_decode("step 0", functools.partial(decode_json_step, document, position=0), warn)
    steps = [step] if step is not None else []
    turns = split_turns(steps, lambda _body: DEFAULT_MODEL)
    return in_memory_recording("rpc", path, steps, turns, step.conversation_id if step else "")


def _load_json_result(path: str, document: dict[str, Any]) -> Recording:
    """`agy -p --output-format json`: one result object (maybe pretty-printed), one turn."""
    decoder = StreamJsonDecoder()
    try:
        items = decoder.feed_event(document)
    except DecodeError as exc:
        raise UsageError(f"{path}: not an agy result ({short_reason(exc)})") from exc
    steps = [item for item in items if isinstance(item, Step)]
    outcome = next((item for item in items if isinstance(item, TurnOutcome)), None)
    turn = TurnInput(user=None, batches=[steps], outcome=outcome)
    return in_memory_recording("stream-json", path, steps, [turn], decoder.conversation_id)


class _StreamJsonTurns:
    """Reads a stream-json capture's turns in order, decoding the file as they are replayed.

    Holds one turn's state and a chunk of the file, never the whole capture: each turn's
    `batches` is an iterator over the decoder's snapshots, and must be drained (replay does)
    before the next turn is read; `next_turn` drains what is left otherwise.
    """

    def __init__(self, path: str, on_skip: Warn) -> None:
        self._on_skip = on_skip
        self.decoder = StreamJsonDecoder(coalesce=True, on_skip=on_skip)
        self._items = decode_stream_json(file_chunks(path), decoder=self.decoder)
        self._open: Iterator[Sequence[Step]] | None = None
        self.title = ""
        self.turns_read = 0

    def _next(self) -> Step | TurnOutcome | None:
        try:
            item = next(self._items, None)
        except FramingError as exc:  # a line over the framer's bound: nothing after it is read
            self._on_skip(f"the rest of the file: not read, {short_reason(exc)}")
            self._items = iter(())
            return None
        if isinstance(item, Step) and item.kind is StepKind.CHECKPOINT and item.title:
            self.title = item.title
        return item

    def next_turn(self) -> TurnInput | None:
        """The next turn, or None when the capture has no more."""
        if self._open is not None:
            for _ in self._open:
                pass
            self._open = None
        user: Step | None = None
        item = self._next()
        while isinstance(item, Step) and item.kind is StepKind.USER:
            user, item = item, self._next()
        if item is None and user is None:
            return None
        self.turns_read += 1
        ending: list[TurnOutcome | None] = [None]

        def body(item: Step | TurnOutcome | None) -> Iterator[Sequence[Step]]:
            while item is not None:
                if isinstance(item, TurnOutcome):
                    ending[0] = item
                    return
                if item.kind is not StepKind.USER:  # a repeated user step is not the answer
                    yield (item,)
                item = self._next()

        self._open = body(item)
        return TurnInput(
            user=user,
            batches=self._open,
            model=self.decoder.model or DEFAULT_MODEL,  # `init.model` (1.3.2+), when agy said
            late_outcome=lambda: ending[0],
        )


def load_stream_json(path: str, warn: Warn) -> Recording:
    # One pass to count the turns and report every skipped line once; each replayed turn is
    # then decoded again from the file, lazily, so memory never holds the whole capture.
    counter = _StreamJsonTurns(path, warn)
    count = 0
    while counter.next_turn() is not None:
        count += 1
    if not count and not counter.decoder.conversation_id:
        raise UsageError(f"{path} holds no stream-json events")
    reader: list[_StreamJsonTurns] = []

    def silent(_text: str) -> None:
        pass

    def load_turn(position: int) -> TurnInput:
        if not reader or reader[0].turns_read > position:
            reader[:] = [_StreamJsonTurns(path, silent)]
        current = reader[0]
        while current.turns_read < position:
            current.next_turn()
        turn = current.next_turn()
        return turn if turn is not None else TurnInput(user=None, batches=())

    def iter_steps() -> Iterator[Step]:
        latest: dict[int, Step] = {}
        walker = _StreamJsonTurns(path, silent)
        while (turn := walker.next_turn()) is not None:
            if turn.user is not None:
                latest[turn.user.index] = turn.user
            for batch in turn.batches:
                latest.update((s.index, s) for s in batch)
        return iter([latest[i] for i in sorted(latest)])

    return Recording(
        format="stream-json",
        path=path,
        turn_count=count,
        load_turn=load_turn,
        iter_steps=iter_steps,
        conversation_id=counter.decoder.conversation_id,
        title=counter.title,
    )
