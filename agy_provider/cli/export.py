"""The `export` subcommand: every saved conversation to Markdown or JSON Lines, several at once.

A progress bar is drawn on a terminal; agy's files are only read.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conversations import conversation_folder
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_conversations_folder
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "write every saved conversation to Markdown or JSON Lines, in parallel"
DESCRIPTION = (
    "Write every conversation in agy's state folder to DEST/<id>.md (or .jsonl: one line "
    "per turn with pi's final message), several files at once, with a progress bar on a "
    "terminal. agy's files are only read."
)
EXAMPLES = (
    "agy-provider export ./agy-export",
    "agy-provider export ./agy-export --format jsonl --jobs 4",
)


class _ProgressBar:
    """`[#####.....] 12/40` redrawn in place on a terminal; nothing elsewhere."""

    def __init__(self, err: TextIO, label: str) -> None:
        self._err = err
        self._label = label
        self._on = err.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self._on or not total:
            return
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        self._err.write(f"\r{self._label} [{bar}] {done}/{total}")
        if done == total:
            self._err.write("\n")
        self._err.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """DEST, the `--format`, how many files at once, and whose (or which) folder to read."""
    parser.add_argument("dest", metavar="DEST", help="the folder to write (created if needed)")
    parser.add_argument("--format", choices=("markdown", "jsonl"), default="markdown")
    parser.add_argument("--jobs", type=int, default=None, help="files at once (default: the CPUs)")
    add_agy_bin(parser, "whose state folder")
    add_conversations_folder(parser)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Export every conversation in the folder to DEST; exit 1 when one could not be."""
    from agy_provider.offline.conversations import export_conversations

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    folder = conversation_folder(args)
    result = export_conversations(
        folder,
        args.dest,
        format=args.format,
        workers=args.jobs,
        progress=_ProgressBar(err, "exporting"),
    )
    for path, why in result.failed:
        print(f"agy-provider: could not export {path}: {why}", file=err)
    print(f"wrote {len(result.written)} file(s) to {args.dest}", file=err)
    if not result.written and not result.failed:
        print(f"(no conversations in {folder})", file=err)
    return EXIT_FAILED if result.failed else EXIT_OK
