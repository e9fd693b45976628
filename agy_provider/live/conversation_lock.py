"""One turn at a time per agy conversation, across threads, event loops and processes.

An advisory `flock` on a private file per (state folder, conversation id): two agy processes on
one conversation would be two writers of one database (agy-sim crashes; real agy is unverified).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from agy_provider.errors import TurnError
from agy_provider.workers import in_background

__all__ = ["ConversationLock", "lock_dir"]

# How often a waiting turn tries again: soon at first (the other turn may be settling), then
# less often for a long wait; neither costs anything measurable.
_FIRST_TRY_AGAIN = 0.02
_LAST_TRY_AGAIN = 0.25


def lock_dir() -> Path:
    """`$XDG_RUNTIME_DIR/agy-provider/locks`, else a folder of this user's in the temp folder;
    made 0700, and refused when another user owns it or it is a symlink."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        Path(runtime) / "agy-provider"
        if runtime
        else Path(tempfile.gettempdir()) / f"agy-provider-{os.getuid()}"
    )
    folder = base / "locks"
    if str(folder) in _verified:
        return folder
    for path in (base, folder):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise TurnError(
                f"{path} is not a folder of this user's; agy-provider keeps its conversation "
                "locks there. Remove it, or set XDG_RUNTIME_DIR to a private folder"
            )
    _verified.add(str(folder))
    return folder


# Lock folders made and checked by this process: four system calls saved at every turn (a
# folder removed since is made again: `_try` forgets it when its lock file cannot be created).
_verified: set[str] = set()


_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class _NoFolder(OSError):
    """The lock folder could not be made (as opposed to the lock file failing)."""


def _close_if_locked(attempt: concurrent.futures.Future[tuple[Path, int | None]]) -> None:
    if not attempt.cancelled() and attempt.exception() is None:
        _path, fd = attempt.result()
        if fd is not None:
            os.close(fd)


class ConversationLock:
    """Held by the turn that runs agy on a conversation, from before agy starts until it is gone."""

    def __init__(self, fd: int, conversation_id: str) -> None:
        self._fd: int | None = fd
        self.conversation_id = conversation_id

    @staticmethod
    def _path(state_dir: str, conversation_id: str) -> Path:
        name = hashlib.sha256(f"{state_dir}\0{conversation_id}".encode()).hexdigest()[:40]
        return lock_dir() / f"{name}.lock"

    @classmethod
    def _found(cls, state_dir: str, conversation_id: str) -> Path:
        try:
            return cls._path(state_dir, conversation_id)
        except OSError as exc:
            raise _NoFolder(str(exc)) from exc

    @classmethod
    def _try(
        cls, path: Path | None, state_dir: str, conversation_id: str
    ) -> tuple[Path, int | None]:
        """The lock's file (found when `path` is None) and its descriptor, locked; None when
        another turn holds it. Raises `_NoFolder` when the lock folder cannot be made."""
        if path is None:
            path = cls._found(state_dir, conversation_id)
        try:
            fd = os.open(path, _LOCK_FLAGS, 0o600)
        except FileNotFoundError:  # the folder went (a temp cleaner): make it again
            _verified.discard(str(path.parent))
            path = cls._found(state_dir, conversation_id)
            fd = os.open(path, _LOCK_FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return path, None
        except BaseException:
            os.close(fd)
            raise
        return path, fd

    @classmethod
    def try_now(cls, state_dir: str, conversation_id: str) -> ConversationLock | None:
        """The lock if it is free at once, else None (blocking: in a worker). Raises OSError or
        `TurnError` when the lock's folder or file cannot be had (`acquire` says it better)."""
        _path, fd = cls._try(None, state_dir, conversation_id)
        return None if fd is None else cls(fd, conversation_id)

    @classmethod
    async def acquire(
        cls,
        state_dir: str,
        conversation_id: str,
        *,
        timeout: float,
        waiting: Callable[[], None] | None = None,
    ) -> ConversationLock:
        """Wait (at most `timeout` seconds, cancellable at every moment) until no other turn runs
        agy on `conversation_id`; `waiting` is called once if it has to wait. Raises `TurnError`
        when the wait runs out, saying what to do."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause = _FIRST_TRY_AGAIN
        told = False
        path: Path | None = None
        while True:
            # The first try also finds the lock's file: one trip to a worker for a free lock.
            attempt = in_background(cls._try, path, state_dir, conversation_id)
            try:
                found, fd = await asyncio.wrap_future(attempt)
            except asyncio.CancelledError:
                # Cancelled while the worker tried: a lock it got must not be held forever.
                attempt.add_done_callback(_close_if_locked)
                raise
            except _NoFolder as exc:
                raise TurnError(f"cannot make the conversation lock folder: {exc}") from exc
            except OSError as exc:
                raise TurnError(f"cannot lock conversation {conversation_id}: {exc}") from exc
            if fd is not None:
                return cls(fd, conversation_id)
            path = found
            if not told and waiting is not None:
                told = True
                waiting()
            if loop.time() >= deadline:
                raise TurnError(
                    f"another turn of agy conversation {conversation_id} was still running after "
                    f"{timeout:.0f}s; agy runs one turn of a conversation at a time. Wait for it "
                    "to end (or abort it), then try again"
                )
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, _LAST_TRY_AGAIN)

    def release(self) -> None:
        """Let the next turn of the conversation go (closing the file drops the lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
