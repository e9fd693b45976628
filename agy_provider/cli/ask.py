"""The `ask` subcommand: AskAntigravity from the command line (the answer on stdout).

Progress goes to stderr; the live path loads only when the turn runs.
"""

from __future__ import annotations

from agy_provider.cli.conventions import one_turn_alone
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_cwd
from agy_provider.cli.options import add_json
from agy_provider.cli.options import add_model
from agy_provider.cli.options import add_thinking
from agy_provider.cli.options import add_timeout
from agy_provider.cli.simulator_state import simulator_state

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "hand one task to agy: the answer on stdout, progress on stderr"
DESCRIPTION = (
    "AskAntigravity from the command line: run PROMPT as one agy turn and print agy's "
    "answer on stdout, its progress (thinking, each tool run) on stderr. Exit 1 with agy's "
    "own error when the turn fails. Refuses to run inside an agy turn."
)
EXAMPLES = (
    "agy-provider ask 'What does this project do?' --model flash",
    "agy-provider ask 'Now fix the first one' --conversation ID --mode accept-edits",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PROMPT, and how its turn runs: folder, model, effort, mode, conversation, time, binary."""
    parser.add_argument("prompt", metavar="PROMPT")
    add_cwd(parser)
    add_model(parser, "flash, pro, sonnet, opus or a slug")
    add_thinking(parser)
    parser.add_argument(
        "--mode",
        choices=("plan", "accept-edits", "default"),
        default=None,
        help="plan: no changes; accept-edits: edit files without asking (default: config)",
    )
    parser.add_argument("--conversation", default=None, help="an agy conversation id to continue")
    add_timeout(parser, "the turn", None)
    add_agy_bin(parser)
    add_json(parser, "print the result (answer, model, usage …) as JSON")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run PROMPT as one agy turn: the answer on `out`, progress on `err`; exit 1 if it fails."""
    import asyncio

    from agy_provider.hosts.ask_command import ask_command
    from agy_provider.store.config import load_config

    agy_bin = args.agy_bin or load_config().agy_bin
    with simulator_state(agy_bin, err), one_turn_alone():
        return asyncio.run(
            ask_command(
                args.prompt,
                cwd=args.cwd,
                model=args.model,
                thinking=args.thinking,
                mode=args.mode,
                conversation=args.conversation,
                timeout=args.timeout,
                agy_bin=args.agy_bin,
                as_json=args.json,
                out=out,
                err=err,
            )
        )
