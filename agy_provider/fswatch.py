"""Wake-ups on changes in one folder (inotify on Linux), as an asyncio wait with a timeout.

Owns nothing but the notification: callers re-read what they watch, so a missed event only
costs a fallback tick. Where inotify is missing every wait simply times out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:  # Linux only; elsewhere callers tick on their own.
    import inotify_simple
except ImportError:  # pragma: no cover - depends on the platform
    inotify_simple = None

__all__ = ["FolderWatch", "watch_folder"]

log = logging.getLogger(__name__)


def _inotify(folder: Path) -> Any:
    """An inotify descriptor watching `folder` (syscalls that can take milliseconds)."""
    assert inotify_simple is not None
    flags = inotify_simple.flags
    fd = inotify_simple.INotify()
    try:
        fd.add_watch(str(folder), flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE)
    except OSError:
        fd.close()
        raise
    return fd


class FolderWatch:
    """inotify on one folder, filtered by name; `wait()` returns True when a change came."""

    def __init__(self, fd: Any, wanted: Callable[[str], bool]) -> None:
        self._wanted = wanted
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._loop.add_reader(self._fd.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        for event in self._fd.read(timeout=0):
            if self._wanted(event.name):
                self._changed.set()

    async def wait(self, timeout: float) -> bool:
        """True when a change was notified before `timeout` seconds passed."""
        if not self._changed.is_set():
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return False
        self._changed.clear()
        return True

    def close(self) -> None:
        self._loop.remove_reader(self._fd.fileno())
        self._fd.close()


async def watch_folder(folder: Path, wanted: Callable[[str], bool]) -> FolderWatch | None:
    """A `FolderWatch`, or None where notifications are unavailable (no inotify, no folder).

    The descriptor is made in a worker thread: on a busy machine its syscalls take milliseconds.
    """
    if inotify_simple is None:
        return None
    try:
        return FolderWatch(await asyncio.to_thread(_inotify, folder), wanted)
    except OSError as exc:
        log.debug("no file notifications for %s (%s); ticking instead", folder, exc)
        return None
