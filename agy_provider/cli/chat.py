"""The `chat` subcommand: one turn with agy, streamed to the terminal as it is written.

The live path (cli/chat_turn.py, asyncio, the provider) loads only when the turn runs.
"""

from __future__ import annotations

import logging
import sys

from agy_provider.cli.conventions import EXIT_FAILED
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conventions import one_turn_alone
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_cwd
from agy_provider.cli.options import add_model
from agy_provider.cli.options import add_thinking
from agy_provider.cli.simulator_state import simulator_state
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "run one turn with agy and stream the answer"
DESCRIPTION = (
    "Run one turn with agy and stream it as it is written. Ctrl-C, SIGTERM and SIGHUP stop "
    "agy and its language server and end the turn as aborted. When agy asks for a "
    "permission or asks a question, you are asked on the terminal. With agy-sim as the "
    "binary, the simulator's state lives in a folder of its own (said on stderr). "
    "NO_COLOR turns colour off. Without a PROMPT on a terminal, an interactive chat: "
    "every line a turn of one conversation, /help lists its commands (/model, /new), "
    "Ctrl-C aborts a turn, Ctrl-D leaves."
)
EXAMPLES = (
    "agy-provider chat 'What is in this folder?'",
    "agy-provider chat -c 'Now add a test for it'",
    "git diff | agy-provider chat - --system 'You review patches tersely.'",
    "agy-provider chat 'hi' --agy-bin agy-sim --format events",
    "agy-provider chat            # on a terminal: an interactive chat (/help inside)",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PROMPT (or none: the interactive chat), which conversation, and how the turn runs."""
    parser.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        default=None,
        help="what to ask; - reads it from stdin; none on a terminal: an interactive chat",
    )
    parser.add_argument(
        "-c",
        "--continue",
        dest="continue_last",
        action="store_true",
        help="continue the last chat started in this folder (its agy conversation)",
    )
    parser.add_argument(
        "--system", default="", help="a system prompt for a new conversation (ignored with -c)"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what the turn does on stderr (-vv: debug detail)",
    )
    add_model(parser, "agy model slug or base")
    add_thinking(parser)
    parser.add_argument("--backend", choices=("auto", "rpc", "sqlite"), default=None)
    parser.add_argument(
        "--session", default="", help="host session id: continue its agy conversation"
    )
    add_cwd(parser)
    add_agy_bin(parser)
    parser.add_argument(
        "--format",
        choices=("text", "events"),
        default="text",
        help="text: for people; events: one pi event per line, flushed as produced",
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one chat turn; exit 1 when it ends in an error or aborted, 128+N on signal N."""
    # The live path (asyncio, the provider, its plugins) loads only for the commands that use it.
    import asyncio

    from agy_provider.cli.chat_turn import run_chat
    from agy_provider.store.config import load_config

    if args.continue_last and args.session:
        raise UsageError("use either -c/--continue or --session, not both")
    prompt = args.prompt
    if prompt is None:
        return _interactive(args, out, err)
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UsageError("the prompt is empty: pass it as an argument, or pipe it in with -")
    _system_for_a_new_conversation(args, err)
    _verbosity(getattr(args, "verbose", 0), err)
    agy_bin = args.agy_bin or load_config().agy_bin
    with simulator_state(agy_bin, err), one_turn_alone():
        result = asyncio.run(
            run_chat(
                prompt,
                model=args.model,
                thinking=args.thinking,
                backend=args.backend,
                session=args.session,
                continue_last=getattr(args, "continue_last", False),
                system=getattr(args, "system", ""),
                cwd=args.cwd,
                agy_bin=args.agy_bin,
                events=args.format == "events",
                verbose=bool(getattr(args, "verbose", 0)),
                out=out,
                err=err,
            )
        )
    if result.signal is not None:
        return 128 + result.signal
    if result.message is None or result.message.stop_reason in ("error", "aborted"):
        return EXIT_FAILED
    return EXIT_OK


def _interactive(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """No PROMPT: an interactive chat on a terminal (cli/repl.py); a usage error otherwise,
    as before there was one (a prompt piped in needs `-`)."""
    if not sys.stdin.isatty():
        raise UsageError(
            "no PROMPT: pass it as an argument, or pipe it in with - "
            "(on a terminal, chat without a prompt opens an interactive chat)"
        )
    if args.format != "text":
        raise UsageError("--format events needs a PROMPT: the interactive chat is for people")
    from agy_provider.cli.repl import ReplSettings
    from agy_provider.cli.repl import run_repl
    from agy_provider.store.config import load_config

    _system_for_a_new_conversation(args, err)
    settings = ReplSettings(
        model=args.model,
        thinking=args.thinking,
        backend=args.backend,
        cwd=args.cwd,
        agy_bin=args.agy_bin,
        system=args.system,
        session=args.session,
        continue_last=args.continue_last,
        verbose=bool(args.verbose),
        fresh=not (args.continue_last or args.session),
    )
    _verbosity(args.verbose, err)
    with simulator_state(args.agy_bin or load_config().agy_bin, err):
        return run_repl(settings, out, err)


def _system_for_a_new_conversation(args: argparse.Namespace, err: TextIO) -> None:
    """`--system` with -c or --session is said, not sent: a continued conversation already has
    its start, and agy would see the text as a message."""
    if args.system and (args.continue_last or args.session):
        print("agy-provider: --system applies to a new conversation; not sent", file=err)
        args.system = ""


def _verbosity(level: int, err: TextIO) -> None:
    """-v: what the turn does (info); -vv: debug detail, on stderr."""
    if not level:
        return
    logger = logging.getLogger("agy_provider")
    logger.setLevel(logging.INFO if level == 1 else logging.DEBUG)
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("agy-provider: %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
