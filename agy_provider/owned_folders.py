"""Private temporary folders named after the process that owns them (pid and start time): the
bridge's config, a turn's images, replay's copies; and the sweep removing those whose owner died.

A host killed outright (SIGKILL) cleans nothing up, and when its lifeline died with it, nothing
else does: its folders (a bridge token, the user's image bytes, a copy of a conversation) are
known by name and removed by the next host that starts (`sweep_once`, at its first folder or its
first agy), never while their owner lives.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading

__all__ = ["make_owned_folder", "owned_prefix", "start_stamp", "sweep_once", "sweep_stale_folders"]

log = logging.getLogger(__name__)

# `agy-provider-<kind>-<owner pid>-<owner start>-<random>`: the owner's start time (hundredths of
# a second) tells a reused pid apart. Only these kinds are ever swept.
KINDS = ("mcp", "images", "replay")
_OWNED_FOLDER = re.compile(r"agy-provider-(" + "|".join(KINDS) + r")-(\d+)-(\d+)-")

_swept: set[str] = set()  # the parent folders this process has swept
_swept_lock = threading.Lock()


def start_stamp(pid: int) -> int:
    """When process `pid` started, in hundredths of a second (0 when it cannot be read)."""
    # Imported here: replay imports this module and, for a clean database, never calls it (its
    # import line stays free of psutil, `tests/test_import_cost.py`).
    import psutil

    try:
        return round(psutil.Process(pid).create_time() * 100)
    except psutil.Error:
        return 0


def owned_prefix(kind: str) -> str:
    """The name prefix of this process's folders of `kind`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of owned folder {kind!r}")
    return f"agy-provider-{kind}-{os.getpid()}-{start_stamp(os.getpid())}-"


def make_owned_folder(kind: str, parent: str | None = None) -> str:
    """A new private folder (0700) of `kind` in `parent` (the temp folder by default), named
    after this process; the first one of a process sweeps what dead owners left there first.
    Blocking (call it in a worker thread). Raises OSError."""
    sweep_once(parent)
    return tempfile.mkdtemp(prefix=owned_prefix(kind), dir=parent)


def sweep_once(parent: str | None = None) -> None:
    """`sweep_stale_folders(parent)`, the first time this process asks for `parent`."""
    folder = parent or tempfile.gettempdir()
    with _swept_lock:
        if folder in _swept:
            return
        _swept.add(folder)
    sweep_stale_folders(folder)


def sweep_stale_folders(parent: str) -> list[str]:
    """Remove the owned folders in `parent` whose owning process is gone; returns them. Only our
    user's folders of the known kinds; a folder of a live owner, or one without an owner in its
    name (an older version's), is never touched. Blocking: a listing of `parent`."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        owned = _OWNED_FOLDER.match(entry.name)
        if owned is None:
            continue
        pid, stamp = int(owned.group(2)), int(owned.group(3))
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or info.st_uid != uid:
            continue
        if stamp and start_stamp(pid) == stamp:
            continue  # its owner lives
        if not stamp and _pid_exists(pid):
            continue  # cannot tell a reused pid apart: leave it
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    if removed:
        log.info("removed %d private folder(s) of processes that are gone", len(removed))
    return removed


def _pid_exists(pid: int) -> bool:
    import psutil

    return bool(psutil.pid_exists(pid))
