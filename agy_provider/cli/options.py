"""How a subcommand's parser is made from its noun module, and the options several nouns share.

A noun module says what is its own (`HELP`, `DESCRIPTION`, `EXAMPLES`, `add_arguments`, `run`);
`add_command` makes every subcommand's parser the same way from it.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol
    from typing import TextIO

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

    class Noun(Protocol):
        """A noun module (cli/ask.py, ...), everything its subcommand has of its own: `HELP`, its
        line in `agy-provider --help`; `DESCRIPTION`, the text atop its own `--help` (None for
        none); `EXAMPLES`, one command a line at the end of it; `add_arguments`; and `run`, its
        arguments, stdout and stderr in, the exit code out."""

        # Read-only, so that a module's constant of a narrower type (`DESCRIPTION = None`) fits.
        @property
        def HELP(self) -> str: ...
        @property
        def DESCRIPTION(self) -> str | None: ...
        @property
        def EXAMPLES(self) -> Sequence[str]: ...

        def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
        def run(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> int: ...


__all__ = [
    "add_agy_bin",
    "add_command",
    "add_conversations_folder",
    "add_cwd",
    "add_json",
    "add_model",
    "add_thinking",
    "add_timeout",
    "examples_epilog",
]


def add_command(commands: SubParsers, name: str, noun: Noun) -> argparse.ArgumentParser:
    """The subcommand `name` made from its noun module: its help, description and examples (at
    the end of its `--help`), then its arguments; `main` calls the noun's `run`."""
    parser = commands.add_parser(
        name,
        help=noun.HELP,
        description=noun.DESCRIPTION,
        epilog=examples_epilog(*noun.EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=noun.run)
    noun.add_arguments(parser)
    return parser


def examples_epilog(*lines: str) -> str:
    """The `examples:` section at the end of a `--help`, one command a line."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


# The options several subcommands declare, each declared here once: the same flag, default and
# help wherever it appears (only the text that says what a command does with it varies).


def add_agy_bin(parser: argparse.ArgumentParser, what: str = "the agy binary") -> None:
    """`--agy-bin`: the binary to run, or (`what`) whose state folder to read."""
    parser.add_argument("--agy-bin", default=None, help=f"{what} (default: AGY_BIN, then PATH)")


def add_json(parser: argparse.ArgumentParser, shape: str) -> None:
    """`--json`: machine-readable output; `shape` says what is printed."""
    parser.add_argument("--json", action="store_true", help=shape)


def add_cwd(parser: argparse.ArgumentParser) -> None:
    """`--cwd`: the folder agy works in."""
    parser.add_argument("--cwd", default=None, help="the folder agy works in (default: here)")


def add_model(parser: argparse.ArgumentParser, names: str) -> None:
    """`--model`: the model of the turn; `names` says what may be given."""
    parser.add_argument("--model", default="", help=f"{names} (default: config)")


def add_thinking(parser: argparse.ArgumentParser) -> None:
    """`--thinking`: the turn's reasoning effort (default: config)."""
    parser.add_argument("--thinking", choices=("low", "medium", "high"), default=None)


def add_conversations_folder(parser: argparse.ArgumentParser) -> None:
    """`--folder`: a conversations folder to read instead of agy's own."""
    parser.add_argument("--folder", default=None, help="a conversations folder to read instead")


def add_timeout(parser: argparse.ArgumentParser, who: str, default: float | None) -> None:
    """`--timeout`: seconds `who` may take; None leaves it to the config."""
    said = "config" if default is None else f"{default:g}"
    parser.add_argument(
        "--timeout", type=float, default=default, help=f"seconds {who} may take (default: {said})"
    )
