"""The `doctor` subcommand: every check a turn needs (cli/health.py), each with how to fix it.

One line per check (marked, coloured on a terminal) or one JSON object per check; exit 1 on a failure.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conventions import colour_for
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_json

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "check agy, PATH, state folders, databases and agy's language server; say how to fix"
DESCRIPTION = (
    "Check everything a turn needs and say how to fix what fails: agy and its version, "
    "PATH, sign-in (`agy models`), the state folders, that agy's conversation databases "
    "open read-only, the language server (probed without a turn where that is possible: "
    "the simulator), and the event sources. Exit 1 when a check fails."
)
EXAMPLES = ("agy-provider doctor", "agy-provider doctor --agy-bin agy-sim")

_MARKS = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which agy to check, and `--json`."""
    add_agy_bin(parser)
    add_json(parser, "one JSON object per check")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run every check and print it with its fix; exit 1 when a check fails."""
    import json

    from agy_provider.cli.health import doctor_checks

    checks = doctor_checks(args.agy_bin or "")
    colour = colour_for(out)
    paint = {"ok": "\x1b[32m", "warn": "\x1b[33m", "fail": "\x1b[31m", "skip": "\x1b[2m"}
    for check in checks:
        if args.json:
            out.write(json.dumps(check.to_json()) + "\n")
            continue
        mark = _MARKS[check.state]
        if colour:
            mark = f"{paint[check.state]}{mark}\x1b[0m"
        out.write(f"{mark} {check.name}: {check.detail}\n")
        if check.fix and check.state in ("fail", "warn"):
            out.write(f"    fix: {check.fix}\n")
    failed = [c.name for c in checks if c.state == "fail"]
    if failed and not args.json:
        print(f"agy-provider: {len(failed)} check(s) failed: {', '.join(failed)}", file=err)
    return EXIT_FAILED if failed else EXIT_OK
