"""A loaded recording (its turns, loaded one at a time, and its steps) and how its files are read.

Owns the `Recording` every format loads into, splitting steps into turns, and reading saved files
safely (regular files only, chunked, a bad row one warning); used by the format loaders.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import IO
from typing import Final

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import TurnOutcome
from agy_provider.errors import DecodeError
from agy_provider.errors import UsageError

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_MODEL",
    "Recording",
    "TurnInput",
    "Warn",
    "file_chunks",
    "guarded_decode",
    "in_memory_recording",
    "open_regular",
    "read_bytes",
    "short_reason",
    "split_turns",
]

DEFAULT_MODEL = "agy"
# Files are read in chunks of this size: big enough that a read is cheap, small enough that a
# capture of any size costs constant memory for its bytes.
CHUNK_BYTES: Final = 64 * 1024
# A warning quotes at most this much of a decoder's message (hostile input can make it huge).
_MAX_REASON: Final = 300


Warn = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class TurnInput:
    """One turn's inputs: its user step (if any), the snapshots in feed order, how it ended.

    `batches` may be a one-shot iterator (a stream-json turn is decoded while it is replayed);
    then `late_outcome`, read only once the batches are exhausted, says how the turn ended.
    """

    user: Step | None
    batches: Iterable[Sequence[Step]]
    outcome: TurnOutcome | None = None
    model: str = DEFAULT_MODEL
    late_outcome: Callable[[], TurnOutcome | None] | None = None

    def ending(self) -> TurnOutcome | None:
        return self.late_outcome() if self.late_outcome is not None else self.outcome


class Recording:
    """A decoded file: its format, its turns (loaded one at a time) and every step.

    A database is read turn by turn — a column scan finds the USER rows, each turn's rows are
    decoded when that turn is replayed — so replaying a long conversation holds one turn in
    memory, not the whole file. Close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        *,
        format: str,
        path: str,
        turn_count: int,
        load_turn: Callable[[int], TurnInput],
        iter_steps: Callable[[], Iterator[Step]],
        conversation_id: str = "",
        title: str = "",
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.format = format
        self.path = path
        self.turn_count = turn_count
        self.conversation_id = conversation_id
        self.title = title
        self._load_turn = load_turn
        self._iter_steps = iter_steps
        self._close = close

    def turn(self, position: int) -> TurnInput:
        """The inputs of turn `position` (0-based)."""
        return self._load_turn(position)

    def steps(self) -> Iterator[Step]:
        """Every step in index order (newest snapshot per index)."""
        return self._iter_steps()

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def in_memory_recording(
    format: str, path: str, steps: Sequence[Step], turns: Sequence[TurnInput], conversation_id: str
) -> Recording:
    """A recording whose steps and turns are all decoded already (a small capture)."""
    title = next(
        (s.title for s in reversed(steps) if s.kind is StepKind.CHECKPOINT and s.title), ""
    )
    return Recording(
        format=format,
        path=path,
        turn_count=len(turns),
        load_turn=turns.__getitem__,
        iter_steps=lambda: iter(steps),
        conversation_id=conversation_id,
        title=title,
    )


def open_regular(path: str) -> IO[bytes]:
    """Open `path` for reading bytes, refusing anything but a regular file.

    The open itself never blocks: `O_NONBLOCK` keeps a FIFO with no writer from hanging us
    before we can look at what we opened (it changes nothing for a regular file).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, socket or device"
            raise UsageError(
                f"{path} is {kind}, not a regular file: replay reads saved files only "
                "(save the stream to a file first)"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_chunks(path: str) -> Iterator[bytes]:
    """The bytes of a regular file, a chunk at a time."""
    with open_regular(path) as handle:
        while chunk := read_bytes(handle, path, CHUNK_BYTES):
            yield chunk


def read_bytes(handle: IO[bytes], path: str, size: int = -1) -> bytes:
    """Read bytes; an I/O error (EIO, or EAGAIN from a file that would block) is exit 2."""
    try:
        return handle.read(size)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def short_reason(exc: BaseException) -> str:
    """An exception's message for a warning, cut to `_MAX_REASON` characters."""
    text = str(exc)
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "…"


def guarded_decode(what: str, decode: Callable[[], Step], warn: Warn) -> Step | None:
    """Run one decode; a bad row or line becomes one warning naming it, never an exception.

    A `DecodeError` is the decoders' contract. Anything else is a decoder bug: still only this
    row is lost, and the warning says to report it (the fuzz tests look for that text).
    """
    try:
        return decode()
    except DecodeError as exc:
        warn(f"{what}: skipped, {short_reason(exc)}")
    except Exception as exc:
        warn(
            f"{what}: skipped, the decoder failed on it ({type(exc).__name__}: {short_reason(exc)}); "
            "please report this as a bug"
        )
    return None


def split_turns(steps: Sequence[Step], models: Callable[[Sequence[Step]], str]) -> list[TurnInput]:
    """One turn per USER step (history never starts one); no USER step at all -> one turn."""
    users = [i for i, s in enumerate(steps) if s.kind is StepKind.USER]
    if not users:
        return [TurnInput(user=None, batches=[steps], model=models(steps))] if steps else []
    turns = []
    for n, at in enumerate(users):
        end = users[n + 1] if n + 1 < len(users) else len(steps)
        body = steps[at + 1 : end]
        turns.append(TurnInput(user=steps[at], batches=[body], model=models(body)))
    return turns
