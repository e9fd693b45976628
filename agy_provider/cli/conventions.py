"""What every subcommand follows: the exit codes, colour only on a terminal without NO_COLOR, and
a command of one turn running agy for that turn alone.

Exit codes: 0 ok, 1 the turn or work failed, 2 usage, 128+N signal N.
"""

from __future__ import annotations

import contextlib
import os

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TextIO

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "colour_for",
    "one_turn_alone",
]


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it; SIGTERM gives 143, SIGHUP 129


def colour_for(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


@contextlib.contextmanager
def one_turn_alone() -> Iterator[None]:
    """While a command that runs one turn and ends runs it: agy for that turn alone (`AGY_WARM=0`
    unless the user set it), since a warm agy and its spare would be started only to be ended.
    The environment is as it was afterwards (a program may run commands in-process)."""
    if "AGY_WARM" in os.environ:
        yield
        return
    os.environ["AGY_WARM"] = "0"
    try:
        yield
    finally:
        os.environ.pop("AGY_WARM", None)
