"""Offline replay: a saved conversation database, RPC step capture or stream-json capture → turns of events.

Detects the format from the content, decodes with the same decoders and assembler live turns use.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Final

from agy_provider.agy.step import Step
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.diffs import BaselineProvider
from agy_provider.errors import UsageError
from agy_provider.offline.capture_recording import load_rpc
from agy_provider.offline.capture_recording import load_stream_json
from agy_provider.offline.recording import DEFAULT_MODEL
from agy_provider.offline.recording import Recording
from agy_provider.offline.recording import Warn
from agy_provider.offline.recording import open_regular
from agy_provider.offline.recording import read_bytes
from agy_provider.offline.sqlite_recording import load_sqlite
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.types import AssistantMessage

__all__ = [
    "DEFAULT_MODEL",
    "Recording",
    "ReplayedTurn",
    "detect_format",
    "load_recording",
    "replay",
    "select_turns",
]

log = logging.getLogger(__name__)

_SQLITE_MAGIC = b"SQLite format 3\x00"
# Format detection looks this far into a file: agy's stream-json can start with a few lines of
# plain text (sign-in errors, notices) before its first event.
_HEAD_BYTES: Final = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayedTurn:
    """One replayed turn: its 1-based number, the user's text, its steps and pi events."""

    number: int
    user_text: str
    steps: Sequence[Step]
    events: Sequence[AssistantMessageEvent]
    title: str = ""

    @property
    def message(self) -> AssistantMessage:
        last = self.events[-1]
        if isinstance(last, DoneEvent):
            return last.message
        assert isinstance(last, ErrorEvent)
        return last.error


def detect_format(path: str) -> str:
    """`sqlite`, `rpc` or `stream-json`, from the content.

    Raises:
        UsageError: the path is not a readable regular file (a FIFO, a device or a directory
            would hang or make no sense), or its content is none of the three.
    """
    with open_regular(path) as handle:
        head = read_bytes(handle, path, _HEAD_BYTES)
    if head.startswith(_SQLITE_MAGIC):
        return "sqlite"
    text = head.lstrip()
    if text.startswith(b"[") or (text.startswith(b"{") and b'"event"' not in text.split(b"\n")[0]):
        return "rpc"
    # stream-json: the first event may follow a few lines of plain text (agy prints sign-in
    # errors and notices on stdout); a bare `--output-format json` result is one object.
    for line in head.split(b"\n"):
        if line.lstrip().startswith(b"{"):
            return "stream-json"
    raise UsageError(
        f"{path} is not an agy conversation database, RPC step capture or stream-json capture"
    )


def load_recording(path: str | os.PathLike[str], *, warn: Warn | None = None) -> Recording:
    """Decode a file into steps and turns; skipped rows and lines are reported through `warn`.

    Raises:
        UsageError: the file cannot be read as any of the three formats (not found, not a
            regular file, not agy's, a malformed database).
    """
    path = os.fspath(path)
    warn = warn or (lambda text: log.warning("%s", text))
    fmt = detect_format(path)
    if fmt == "sqlite":
        return load_sqlite(path, warn)
    if fmt == "rpc":
        return load_rpc(path, warn)
    return load_stream_json(path, warn)


def select_turns(count: int, turn: str) -> range:
    """`last`, `all` or a 1-based number -> the indices of the turns to replay."""
    if count == 0:
        return range(0)
    if turn == "last":
        return range(count - 1, count)
    if turn == "all":
        return range(count)
    try:
        number = int(turn)
    except ValueError as exc:
        raise UsageError(f"--turn takes last, all or a number, not {turn!r}") from exc
    if not 1 <= number <= count:
        raise UsageError(f"turn {number} does not exist: the recording has {count} turn(s)")
    return range(number - 1, number)


def replay(
    recording: Recording,
    turn: str = "last",
    *,
    partials: bool = True,
    baselines: BaselineProvider | None = None,
) -> Iterator[ReplayedTurn]:
    """Assemble the selected turns into pi events, exactly as a live turn would have.

    `partials=False` leaves each event's `partial` empty (faster, for output that drops it).
    `baselines` gives edited files' old texts for their diffs (`diffs.GitBaselines` with
    `blocking=True` reads HEAD); without it edits are diffed from their calls alone.
    """
    for position in select_turns(recording.turn_count, turn):
        inputs = recording.turn(position)
        start = inputs.user.index if inputs.user is not None else -1
        assembler = StepAssembler(
            model=inputs.model,
            turn_start=start,
            timestamp=inputs.user.created_at_ms if inputs.user is not None else 0,
            track_partial=partials,
            baselines=baselines,
        )
        events: list[AssistantMessageEvent] = assembler.start()
        steps: dict[int, Step] = {}
        for batch in inputs.batches:
            events.extend(assembler.feed(batch))
            steps.update((s.index, s) for s in batch)
        events.extend(assembler.finish(inputs.ending()))
        ordered = [steps[i] for i in sorted(steps)]
        if inputs.user is not None:
            ordered.insert(0, inputs.user)
        yield ReplayedTurn(
            number=position + 1,
            user_text=inputs.user.text if inputs.user is not None else "",
            steps=ordered,
            events=events,
            title=assembler.title,
        )
