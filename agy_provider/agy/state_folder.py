"""Which state folder an agy writes: the one rule, for the real agy and the bundled simulator.

Owns the simulator's own folder (never the real agy's state) and agy's default folder.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["simulator_state_dir"]


def simulator_state_dir() -> Path:
    """The simulator's own state folder: `$XDG_STATE_HOME/agy-provider/sim-state`.

    Never the real agy's state: simulated conversations there would be offered by `agy --continue`.
    """
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "agy-provider" / "sim-state"
