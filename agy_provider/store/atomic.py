"""Crash-safe JSON files shared by several processes: an exclusive lock, temp file, fsync, rename.

A reader sees the old file or the new one, never a torn one, even after kill -9 mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Iterable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agy_provider.errors import DecodeError
from agy_provider.wire import jsontext

__all__ = [
    "file_lock",
    "read_json",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `<path>.lock` (blocks until it is free).

    Raises OSError (ELOOP, saying so) when the lock file is a symbolic link: `O_CREAT` would
    follow even a dangling one and create its target wherever it points.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = f"{path}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise OSError(
            errno.ELOOP,
            f"the lock file {lock} is a symbolic link, which is never followed; remove it",
            lock,
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_json(path: Path, missing: Any = None) -> Any:
    """The file's JSON, or `missing` when it does not exist. Raises ValueError when it is not JSON.

    Strict JSON (`wire/jsontext`): nesting past its depth bound, `NaN` or a huge number is "not
    JSON" too, so a hostile file is corrupt rather than a RecursionError deep in a caller.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return missing
    try:
        return jsontext.loads(data, what="its content")
    except DecodeError as exc:
        raise ValueError(str(exc)) from exc


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace `path` with `data` as indented JSON (`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text`: write a temp file beside it, fsync, rename, fsync the folder.

    `durable=False` skips both fsyncs, for a file that only says what is true right now (a
    reader still sees the old file or the new one; after a crash of the machine it may find an
    empty file).
    """
    write_bytes_atomic(path, [text.encode("utf-8")], durable=durable)


def write_bytes_atomic(
    path: Path, pieces: Iterable[bytes | memoryview], *, durable: bool = True
) -> None:
    """`write_text_atomic` for a file given as pieces of bytes written one after another (a
    store that copies most of its old file need not join it into one string first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for piece in pieces:
                handle.write(piece)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
