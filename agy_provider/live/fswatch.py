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

from agy_provider.workers import in_background
from agy_provider.workers import off_loop

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


class _SharedWatch:
    """One inotify descriptor per folder and event loop, shared by every watcher of that folder:
    many turns in one state folder would otherwise each read every other turn's events."""

    def __init__(self, fd: Any, key: tuple[int, str]) -> None:
        self._fd = fd
        self._key = key
        self.loop = asyncio.get_running_loop()
        self.watchers: set[FolderWatch] = set()
        self.closed = False
        self.loop.add_reader(fd.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        names = {event.name for event in self._fd.read(timeout=0)}
        for watcher in self.watchers:
            watcher.notice(names)

    def leave(self, watcher: FolderWatch | None) -> None:
        if watcher is not None:
            self.watchers.discard(watcher)
        if not self.watchers and not self.closed:
            if _shared.get(self._key) is self:
                del _shared[self._key]
            if not self.loop.is_closed():
                self.loop.remove_reader(self._fd.fileno())
            self.closed = True
            # Closing an inotify descriptor waits for the kernel's grace period (~10 ms on a
            # busy machine): never on the loop.
            in_background(self._fd.close)


_shared: dict[tuple[int, str], _SharedWatch] = {}


class FolderWatch:
    """Changes in one folder, filtered by name; `wait()` returns True when a change came."""

    def __init__(self, shared: _SharedWatch, wanted: Callable[[str], bool]) -> None:
        self._wanted = wanted
        self._changed = asyncio.Event()
        self._shared: _SharedWatch | None = shared
        shared.watchers.add(self)

    def notice(self, names: set[str]) -> None:
        if not self._changed.is_set() and any(self._wanted(name) for name in names):
            self._changed.set()

    async def wait(self, timeout: float) -> bool:
        """True when a change was notified before `timeout` seconds passed."""
        if not self._changed.is_set():
            try:
                # asyncio.timeout, not wait_for: no task per wait (20 turns wait very often).
                async with asyncio.timeout(timeout):
                    await self._changed.wait()
            except TimeoutError:
                return False
        self._changed.clear()
        return True

    def close(self) -> None:
        if self._shared is not None:
            self._shared.leave(self)
            self._shared = None


async def watch_folder(folder: Path, wanted: Callable[[str], bool]) -> FolderWatch | None:
    """A `FolderWatch`, or None where notifications are unavailable (no inotify, no folder).

    Watchers of one folder share one descriptor, made in a worker thread the first time: on a
    busy machine its syscalls take milliseconds. Turns that start together wait for the same
    one rather than each making (and closing) their own.
    """
    if inotify_simple is None:
        return None
    loop = asyncio.get_running_loop()
    key = (id(loop), str(folder))
    while True:
        shared = _shared.get(key)
        if shared is None or shared.loop is not loop or shared.closed:
            making = _making.get(key)
            if making is None or making.get_loop() is not loop:
                making = _making[key] = loop.create_task(_share(folder, key))
            try:
                # Shielded: one waiter cancelled must not cancel the others' descriptor.
                shared = await asyncio.shield(making)
            except asyncio.CancelledError:
                making.add_done_callback(_close_if_unwatched)
                raise
            except OSError as exc:
                log.debug("no file notifications for %s (%s); ticking instead", folder, exc)
                return None
        if not shared.closed:  # its last watcher could have left while this one waited
            return FolderWatch(shared, wanted)


_making: dict[tuple[int, str], asyncio.Task[_SharedWatch]] = {}


async def _share(folder: Path, key: tuple[int, str]) -> _SharedWatch:
    try:
        fd = await off_loop(_inotify, folder)
        shared = _shared[key] = _SharedWatch(fd, key)
        return shared
    finally:
        _making.pop(key, None)


def _close_if_unwatched(making: asyncio.Task[_SharedWatch]) -> None:
    """A descriptor made for waiters who were all cancelled must not stay open.

    Checked one loop step later, after the waiters still there have joined it.
    """
    if making.cancelled() or making.exception() is not None:
        return
    shared = making.result()
    if not shared.loop.is_closed():
        shared.loop.call_soon(shared.leave, None)
