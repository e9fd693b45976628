"""The `models` subcommand: the models agy offers (`agy models`), tiers folded into efforts.

As text, one model a line, or as one JSON object per model.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_json

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "list the models agy offers (`agy models`), tiers folded into efforts"
DESCRIPTION = None
EXAMPLES = ("agy-provider models", "agy-provider models --agy-bin agy-sim --json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which agy to ask, and `--json`."""
    add_agy_bin(parser)
    add_json(parser, "one JSON object per model")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List `agy models`, one model a line (or a JSON object)."""
    import json

    from agy_provider.agy.models import list_models
    from agy_provider.live.runner import find_agy
    from agy_provider.store.config import load_config

    for model in list_models(find_agy(args.agy_bin or load_config().agy_bin)):
        if args.json:
            row = {"id": model.id, "name": model.name, "efforts": list(model.efforts)}
            out.write(json.dumps(row) + "\n")
        else:
            efforts = f"  (effort: {', '.join(model.efforts)})" if model.efforts else ""
            out.write(f"{model.id}\t{model.name}{efforts}\n")
    return EXIT_OK
