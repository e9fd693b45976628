"""The `status` subcommand: agy (found, version, signed in), settings, sessions, conversations,
the warm agys of every host.

The facts come from cli/health.py; exit 1 when any of them is a problem.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_json

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = (
    "agy (found, version, signed in), settings, sessions, conversations, event sources, warm agys"
)
DESCRIPTION = None
EXAMPLES = ("agy-provider status", "agy-provider status --json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which agy to look at, and `--json`."""
    add_agy_bin(parser)
    add_json(parser, "one JSON object")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print what is known about agy and the provider; exit 1 when any of it is a problem."""
    import json

    from agy_provider.cli.health import gather_status

    status = gather_status(args.agy_bin or "")
    if args.json:
        out.write(json.dumps(status.to_json(), indent=2) + "\n")
    else:
        width = max(len(label) for label, _ in status.rows)
        out.writelines(f"{label:<{width}}  {value}\n" for label, value in status.rows)
    return EXIT_FAILED if status.problems else EXIT_OK
