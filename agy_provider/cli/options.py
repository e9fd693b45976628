"""How a subcommand's parser is made: its examples under the help, and the options several share.

Each noun module calls `add_command` from its `add_parser(commands)`.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Sequence

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["add_command", "examples_epilog"]


def add_command(
    commands: SubParsers, name: str, examples: Sequence[str], **kwargs: str
) -> argparse.ArgumentParser:
    """A subcommand's parser, its examples shown at the end of its `--help`."""
    return commands.add_parser(
        name,
        epilog=examples_epilog(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,  # type: ignore[arg-type]
    )


def examples_epilog(*lines: str) -> str:
    """The `examples:` section at the end of a `--help`, one command a line."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)
