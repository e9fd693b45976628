"""The `agy-provider` command line: thin noun subcommands over library functions.

Each subcommand parses arguments, imports and calls one library function, and maps typed errors to
a message on stderr and an exit code: 0 ok, 1 the turn or work failed, 2 usage, 128+N signal N.
Each noun's parser and runner live in a module of their own (cli/replay.py, cli/chat.py, ...).
"""

from __future__ import annotations

import argparse
import logging
import sys

from agy_provider import __version__
from agy_provider.cli import ask
from agy_provider.cli import chat
from agy_provider.cli import config
from agy_provider.cli import conversations
from agy_provider.cli import demo
from agy_provider.cli import doctor
from agy_provider.cli import export
from agy_provider.cli import models
from agy_provider.cli import replay
from agy_provider.cli import serve
from agy_provider.cli import sessions
from agy_provider.cli import status
from agy_provider.cli import usage
from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_INTERRUPTED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conventions import EXIT_USAGE
from agy_provider.cli.options import add_command
from agy_provider.cli.options import examples_epilog
from agy_provider.errors import AgyError
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from agy_provider.cli.options import Noun

__all__ = ["build_parser", "main"]

# Subcommands import what they need when they run: `--help`, `replay` and `models` never pay for
# the live path (asyncio, psutil, httpx, pluggy), and `chat` never pays for replay. Each name's
# module says what its subcommand takes and does, in the order `--help` lists them.
_NOUNS: dict[str, Noun] = {
    "replay": replay,
    "chat": chat,
    "ask": ask,
    "models": models,
    "demo": demo,
    "usage": usage,
    "status": status,
    "doctor": doctor,
    "config": config,
    "sessions": sessions,
    "conversations": conversations,
    "export": export,
    "serve": serve,
}


def build_parser() -> argparse.ArgumentParser:
    """The `agy-provider` parser: a subcommand made from each noun module."""
    parser = argparse.ArgumentParser(
        prog="agy-provider",
        description="Google's Antigravity CLI (agy) as a streaming model provider.",
        epilog=examples_epilog(
            "agy-provider chat 'What is in this folder?'",
            "agy-provider chat -c 'And what would you change?'",
            "agy-provider doctor",
            "agy-provider conversations",
            "agy-provider COMMAND --help",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agy-provider {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    for name, noun in _NOUNS.items():
        add_command(commands, name, noun)
    return parser


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 the work failed, 2 usage, 128+N signal N)."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:  # a host that configured logging keeps its own
        logging.basicConfig(level=logging.WARNING, format="agy-provider: %(message)s", stream=err)
    try:
        code: int = args.run(args, out, err)
        return code
    except UsageError as exc:
        print(f"agy-provider: {exc}", file=err)
        return EXIT_USAGE
    except AgyError as exc:
        print(f"agy-provider: {exc}", file=err)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("agy-provider: interrupted", file=err)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
