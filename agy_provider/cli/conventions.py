"""What every subcommand follows: the exit codes, and colour only on a terminal without NO_COLOR.

Exit codes: 0 ok, 1 the turn or work failed, 2 usage, 128+N signal N.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "colour_for"]


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it; SIGTERM gives 143, SIGHUP 129


def colour_for(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")
