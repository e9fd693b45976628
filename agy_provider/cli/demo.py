"""The `demo` subcommand: one chat turn with agy, or with the bundled agy-sim when agy is missing.

It runs the `chat` subcommand's runner with the demo's prompt.
"""

from __future__ import annotations

import argparse
import os

from agy_provider.agy.state_folder import SIMULATOR
from agy_provider.cli import chat
from agy_provider.errors import AgyNotFoundError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "run one demo turn with agy, or with the bundled simulator when agy is not installed"
DESCRIPTION = None
EXAMPLES = ("agy-provider demo", "agy-provider demo --prompt 'List the files here'")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--prompt`: what the demo asks."""
    parser.add_argument(
        "--prompt", default="Say hello and tell me in one sentence what you can do."
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """A turn with the real agy when there is one; else, said out loud, with agy-sim."""
    from agy_provider.live.runner import find_agy

    try:
        agy = find_agy(os.environ.get("AGY_BIN", ""))
    except AgyNotFoundError:
        agy = ""
    if agy:
        print(f"Running a turn with {agy}.", file=err)
    else:
        agy = find_agy(SIMULATOR)
        print("agy is not installed: using the bundled simulator agy-sim instead.", file=err)
    chat_args = argparse.Namespace(
        prompt=args.prompt,
        continue_last=False,
        system="",
        verbose=0,
        model="",
        thinking=None,
        backend=None,
        session="",
        cwd=None,
        agy_bin=agy,
        format="text",
    )
    return chat.run(chat_args, out, err)
