"""The bridge's private folders: each named after its owning process, removed when the bridge
closes, and those of owners that are gone swept by the next bridge start (`sweep_stale_folders`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil

import psutil

from agy_provider import lifeline

__all__ = ["sweep_stale_folders"]

# Logged under the bridge's name, as before these were split out of it (hosts filter by it).
log = logging.getLogger("agy_provider.bridge.mcp_bridge")

# A bridge folder is named `agy-provider-mcp-<owner pid>-<owner start>-<random>`: a folder whose
# owner is gone (a host killed outright, its lifeline too) is known by name and removed by the
# next bridge start; the owner's start time (hundredths of a second) tells a reused pid apart.
_FOLDER_PREFIX = "agy-provider-mcp-"
_OWNED_FOLDER = re.compile(re.escape(_FOLDER_PREFIX) + r"(\d+)-(\d+)-")


def _start_stamp(pid: int) -> int:
    """When process `pid` started, in hundredths of a second (0 when it cannot be read)."""
    try:
        return round(psutil.Process(pid).create_time() * 100)
    except psutil.Error:
        return 0


def _remove_folder(folder: str | os.PathLike[str]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    lifeline.drop_folder(os.fspath(folder))


def sweep_stale_folders(parent: str) -> list[str]:
    """Remove the bridge folders in `parent` whose owning process is gone (a host killed with
    its lifeline); returns them. Only our user's folders named by `HostToolBridge`; a folder
    of a live owner, or of an older version (no owner in its name), is never touched.
    Blocking: a listing of `parent` (call it in a worker thread)."""
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
        pid, stamp = int(owned.group(1)), int(owned.group(2))
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or info.st_uid != uid:
            continue
        if stamp and _start_stamp(pid) == stamp:
            continue  # its owner lives
        if not stamp and psutil.pid_exists(pid):
            continue  # cannot tell a reused pid apart: leave it
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    if removed:
        log.info("removed %d bridge folder(s) of processes that are gone", len(removed))
    return removed
