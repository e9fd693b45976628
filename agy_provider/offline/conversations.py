"""agy's saved conversations, read-only: one summary per database, and export to Markdown or JSONL.

Every database is read through replay's loader (`agy/database.py` opens it `mode=ro`); export
writes only into a folder of the caller's, never beside agy's files, and spreads files over a
process pool (decoding is CPU-bound Python, so threads would queue on the GIL).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed
from pathlib import Path

from agy_provider.errors import AgyError
from agy_provider.errors import UsageError

__all__ = [
    "EXPORT_FORMATS",
    "ConversationSummary",
    "ExportResult",
    "conversation_files",
    "export_conversations",
    "list_conversations",
    "summarise_conversation",
]

log = logging.getLogger(__name__)

EXPORT_FORMATS = ("markdown", "jsonl")
_SUFFIX = {"markdown": ".md", "jsonl": ".jsonl"}

Progress = Callable[[int, int], object]


@dataclasses.dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One saved conversation: id (the file's stem), title (its newest checkpoint), `updated`
    (epoch seconds of its last turn, else the file's time), the model of its last turn, turns,
    and the tokens of every turn (pi's `totalTokens`). `error` says why a file could not be read.
    """

    id: str
    path: str
    title: str = ""
    updated: float = 0.0
    model: str = ""
    turns: int = 0
    tokens: int = 0
    error: str = ""

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class ExportResult:
    """What an export wrote (`written` paths) and the files it could not read (path, reason)."""

    written: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


def conversation_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The conversation databases (`*.db`) in agy's `conversations/` folder, newest first.

    A `*.db` entry that is not a regular file (a folder, FIFO, device, socket, broken link) is
    skipped with one warning naming it and what it is; it is looked at, never opened (opening
    a FIFO would block until someone writes to it).
    """
    base = Path(folder)
    try:
        candidates = [p for p in base.iterdir() if p.suffix == ".db"]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(
            f"cannot read {base}: {exc.strerror or exc}; check its permissions"
        ) from exc
    found = []
    for path in candidates:
        why = _not_a_database_file(path)
        if why:
            log.warning("skipped %s: %s, not a conversation database file", path, why)
        else:
            found.append(path)
    return sorted(found, key=_mtime, reverse=True)


def _not_a_database_file(path: Path) -> str:
    """Why `path` cannot be a database file ("" when it is a regular file, through links)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else "gone while being listed"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return ""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _mtime(path: Path) -> float:
    times = []
    for candidate in (path, path.with_name(path.name + "-wal")):
        try:
            times.append(candidate.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _quiet(text: str) -> None:
    """Replay's per-row warnings: a summary counts turns, it does not report rows."""


def summarise_conversation(path: str | os.PathLike[str]) -> ConversationSummary:
    """Read one database (read-only) into its summary; never raises for a bad file."""
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay

    path = Path(path)
    stem = path.stem
    try:
        with load_recording(str(path), warn=_quiet) as recording:
            tokens = 0
            model = ""
            updated = 0.0
            for turn in replay(recording, "all", partials=False):
                message = turn.message
                tokens += message.usage.total_tokens
                model = message.model or model
                if turn.steps and turn.steps[0].created_at_ms:
                    updated = turn.steps[0].created_at_ms / 1000
            return ConversationSummary(
                id=recording.conversation_id or stem,
                path=str(path),
                title=recording.title.split("\n", 1)[0],
                updated=updated or _mtime(path),
                model=model,
                turns=recording.turn_count,
                tokens=tokens,
            )
    except (AgyError, OSError) as exc:
        return ConversationSummary(id=stem, path=str(path), updated=_mtime(path), error=str(exc))


def _pool(count: int, workers: int | None) -> int:
    return max(1, min(workers or os.cpu_count() or 1, count, 8))


def _parallel(
    function: Callable[[Path], object],
    paths: Sequence[Path],
    workers: int | None,
    progress: Progress | None,
) -> Iterator[tuple[int, object]]:
    """(position, result) of `function` over `paths`, in a process pool when it pays."""
    total = len(paths)
    if progress is not None:
        progress(0, total)
    if _pool(total, workers) == 1:
        for position, path in enumerate(paths):
            yield position, function(path)
            if progress is not None:
                progress(position + 1, total)
        return
    with ProcessPoolExecutor(max_workers=_pool(total, workers)) as pool:
        futures = {pool.submit(function, path): n for n, path in enumerate(paths)}
        for done, future in enumerate(as_completed(futures), start=1):
            yield futures[future], future.result()
            if progress is not None:
                progress(done, total)


def list_conversations(
    folder: str | os.PathLike[str],
    *,
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[ConversationSummary]:
    """Summaries of every conversation in `folder` (agy's `conversations/`), newest first."""
    paths = conversation_files(folder)
    results: list[ConversationSummary | None] = [None] * len(paths)
    for position, summary in _parallel(summarise_conversation, paths, workers, progress):
        assert isinstance(summary, ConversationSummary)
        results[position] = summary
    done = [s for s in results if s is not None]
    return sorted(done, key=lambda s: s.updated, reverse=True)


@dataclasses.dataclass(frozen=True, slots=True)
class _ExportJob:
    destination: str
    format: str

    def __call__(self, path: Path) -> tuple[str, str]:
        """(written path, "") or (source path, why it failed)."""
        return _export_one(path, Path(self.destination), self.format)


def _export_one(path: Path, destination: Path, fmt: str) -> tuple[str, str]:
    from agy_provider.offline.formatters import json_line
    from agy_provider.offline.formatters import markdown
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay

    target = destination / (path.stem + _SUFFIX[fmt])
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        with (
            load_recording(str(path), warn=_quiet) as recording,
            open(partial, "w", encoding="utf-8") as out,
        ):
            turns = replay(recording, "all", partials=False)
            if fmt == "markdown":
                rows = ((t.number, t.user_text, t.message) for t in turns)
                out.writelines(line + "\n" for line in markdown(rows, title=recording.title))
            else:
                conversation = recording.conversation_id or path.stem
                for turn in turns:
                    row = {
                        "conversation": conversation,
                        "turn": turn.number,
                        "user": turn.user_text,
                        "message": turn.message.to_json(),
                    }
                    out.write(json_line(row) + "\n")
        os.replace(partial, target)
    except (AgyError, OSError) as exc:
        with _suppress_os():
            partial.unlink()
        return str(path), str(exc) or type(exc).__name__
    return str(target), ""


class _suppress_os:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, traceback: object) -> bool:
        return isinstance(value, OSError)


def export_conversations(
    folder: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    format: str = "markdown",
    workers: int | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Write every conversation in `folder` to `destination/<id>.md` (or `.jsonl`: one line per
    turn, `{"conversation", "turn", "user", "message"}` with pi's final message), in parallel.

    Each file is written whole or not at all (a temporary name, then a rename). Raises
    `UsageError` for an unknown format or a destination inside agy's own folder.
    """
    if format not in EXPORT_FORMATS:
        raise UsageError(f"export format must be markdown or jsonl, not {format!r}")
    source = Path(folder).resolve()
    target = Path(destination).resolve()
    if target == source or source in target.parents or target in source.parents:
        raise UsageError(
            f"export into a folder of your own, not {target} (agy's files are never written)"
        )
    paths = conversation_files(source)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {target}: {exc.strerror or exc}") from exc
    written: list[str] = []
    failed: list[tuple[str, str]] = []
    job = _ExportJob(str(target), format)
    for _, result in _parallel(job, paths, workers, progress):
        assert isinstance(result, tuple)
        where, why = result
        if why:
            failed.append((where, why))
        else:
            written.append(where)
    return ExportResult(tuple(sorted(written)), tuple(sorted(failed)))
