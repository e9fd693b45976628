"""Which state folder an agy writes: the one rule, for the real agy and the bundled simulator.

Owns the simulator's own folder (never the real agy's state) and agy's default folder.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "SIMULATOR",
    "agy_default_state_dir",
    "chosen_state_folder",
    "is_simulator",
    "simulator_state_dir",
    "state_folder",
]

SIMULATOR = "agy-sim"


def simulator_state_dir() -> Path:
    """The simulator's own state folder: `$XDG_STATE_HOME/agy-provider/sim-state`.

    Never the real agy's state: simulated conversations there would be offered by `agy --continue`.
    """
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "agy-provider" / "sim-state"


def is_simulator(binary: str) -> bool:
    """Whether `binary` (a name or a path) is the bundled simulator."""
    return os.path.basename(binary) == SIMULATOR


def agy_default_state_dir() -> Path:
    """Where the real agy keeps its state when nobody names a folder."""
    return Path(os.path.expanduser("~")) / ".gemini" / "antigravity-cli"


def chosen_state_folder(binary: str, configured: str = "") -> str:
    """The folder to tell agy explicitly, or "" for agy's own default.

    `configured` (config `app_data_dir`), else `ANTIGRAVITY_APP_DATA_DIR`, else — for the
    simulator — its own folder. Absolute: agy runs in the turn's cwd, and both must name the same
    folder.
    """
    chosen = configured or os.environ.get("ANTIGRAVITY_APP_DATA_DIR", "")
    if not chosen and is_simulator(binary):
        chosen = str(simulator_state_dir())
    return os.path.abspath(chosen) if chosen else ""


def state_folder(binary: str, configured: str = "") -> Path:
    """The folder this agy writes: `chosen_state_folder`, else agy's default."""
    chosen = chosen_state_folder(binary, configured)
    return Path(chosen) if chosen else agy_default_state_dir()
