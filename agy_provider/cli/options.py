"""How a subcommand's parser is made: its examples under the help, and the options several share.

Each noun module calls `add_command` from its `add_parser(commands)`.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Sequence
    from typing import TextIO

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
    # A subcommand's runner: its arguments, stdout and stderr in, the exit code out.
    Runner = Callable[[argparse.Namespace, TextIO, TextIO], int]

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


def add_command(
    commands: SubParsers, name: str, examples: Sequence[str], run: Runner, **kwargs: str
) -> argparse.ArgumentParser:
    """A subcommand's parser, its examples shown at the end of its `--help`; `main` calls `run`."""
    parser = commands.add_parser(
        name,
        epilog=examples_epilog(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,  # type: ignore[arg-type]
    )
    parser.set_defaults(run=run)
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
