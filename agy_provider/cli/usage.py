"""The `usage` subcommand: agy's quota (`agy -p /usage`), each window's share left and its reset.

A quota already spent is reported as the failure it is (exit 1), with when it resets.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_json
from agy_provider.cli.options import add_timeout
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "agy's quota: each window's share left and when it resets (`agy -p /usage`)"
DESCRIPTION = None
EXAMPLES = (
    "agy-provider usage",
    "agy-provider usage --json",
    "AGY_SIM_VERSION=1.3.3 agy-provider usage --agy-bin agy-sim",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which agy, `--json`, and how long `agy -p /usage` may take."""
    add_agy_bin(parser)
    add_json(parser, "one JSON object")
    add_timeout(parser, "agy", 60.0)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print agy's quota windows; exit 1 when the quota is already spent."""
    import json

    from agy_provider.agy.usage_command import read_quota_usage
    from agy_provider.errors import QuotaExceededError
    from agy_provider.live.runner import find_agy
    from agy_provider.store.config import load_config

    if not 0 < args.timeout <= 3600:
        raise UsageError(f"--timeout must be between 0 and 3600 seconds, not {args.timeout}")
    try:
        report = read_quota_usage(
            find_agy(args.agy_bin or load_config().agy_bin), timeout=args.timeout
        )
    except QuotaExceededError as exc:
        if args.json:
            row = {"error": str(exc), "resetsIn": exc.resets_in, "resetsAt": exc.resets_at}
            out.write(json.dumps(row) + "\n")
        print(f"agy-provider: {exc}", file=err)
        return EXIT_FAILED
    out.write(json.dumps(report.to_json(), indent=2) + "\n" if args.json else report.table())
    return EXIT_OK
