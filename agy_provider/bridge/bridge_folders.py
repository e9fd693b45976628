"""The bridge's private folders: each named after its owning process (`owned_folders`), removed
when the bridge closes, and those of owners that are gone swept by the next bridge start.
"""

from __future__ import annotations

import os
import shutil

from agy_provider import lifeline
from agy_provider.owned_folders import make_owned_folder
from agy_provider.owned_folders import sweep_stale_folders

__all__ = ["make_bridge_folder", "remove_folder", "sweep_stale_folders"]


def make_bridge_folder(parent: str) -> str:
    """A new bridge folder in `parent`, after sweeping those of owners that are gone (at every
    bridge start: a folder holds a token). Blocking. Raises OSError."""
    sweep_stale_folders(parent)
    return make_owned_folder("mcp", parent)


def remove_folder(folder: str | os.PathLike[str]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    lifeline.drop_folder(os.fspath(folder))
