"""When the binary is agy-sim, a turn's conversations go to the simulator's own state folder.

Used by the subcommands that run a turn (`chat`, `ask`).
"""

from __future__ import annotations

import contextlib
import os

from agy_provider.agy.state_folder import chosen_state_folder
from agy_provider.agy.state_folder import is_simulator

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TextIO

__all__ = ["simulator_state"]


@contextlib.contextmanager
def simulator_state(agy_bin: str, err: TextIO) -> Iterator[None]:
    """When the binary is the simulator, keep its conversations out of the real agy's state.

    An explicit folder (config `app_data_dir` / `AGY_APP_DATA_DIR`, or `ANTIGRAVITY_APP_DATA_DIR`)
    is honoured; otherwise the simulator's own folder becomes the turn's `app_data_dir` through the
    config's environment override, which the provider reads when the turn starts, passes to agy
    and searches for the conversation. The process environment is restored afterwards.
    """
    if not is_simulator(agy_bin):
        yield
        return
    from agy_provider.store.config import load_config

    explicit = load_config().app_data_dir or os.environ.get("ANTIGRAVITY_APP_DATA_DIR", "")
    folder = chosen_state_folder(agy_bin, explicit)
    print(f"agy-sim keeps its conversations in {folder}", file=err)
    if explicit:
        yield
        return
    previous = os.environ.get("AGY_APP_DATA_DIR")
    os.environ["AGY_APP_DATA_DIR"] = folder
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("AGY_APP_DATA_DIR", None)
        else:
            os.environ["AGY_APP_DATA_DIR"] = previous
