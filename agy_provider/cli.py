"""The `agy-provider` command line: thin noun subcommands over library functions.

Each subcommand parses arguments, calls one library function, and maps typed errors to a message and exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from agy_provider import __version__
from agy_provider.errors import AgyError, UsageError
from agy_provider.formatters import event_line, markdown, step_line, transcript
from agy_provider.replay import load_recording, replay

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agy-provider",
        description="Google's Antigravity CLI (agy) as a streaming model provider.",
    )
    parser.add_argument("--version", action="version", version=f"agy-provider {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    rp = commands.add_parser(
        "replay",
        help="replay a saved agy conversation as pi events, steps, a transcript or markdown",
        description=(
            "Replay a conversation database (.db, opened read-only), a JSON file of RPC steps, "
            "or an NDJSON stream-json capture; the format is detected from the content."
        ),
    )
    rp.add_argument("path", metavar="PATH")
    rp.add_argument(
        "--format",
        choices=("events", "steps", "transcript", "markdown"),
        default="events",
        help="events: one pi event per line (default); steps: one normalized step per line; "
        "transcript: for people; markdown: a shareable document",
    )
    rp.add_argument("--turn", default="last", help="last (default), all, or a 1-based number")
    rp.set_defaults(run=_replay)
    return parser


def _replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    def warn(text: str) -> None:
        print(f"warning: {text}", file=err)

    recording = load_recording(args.path, warn=warn)
    if not recording.turns:
        raise UsageError(f"{args.path} holds no turns to replay")
    turns = list(replay(recording, args.turn))
    title = next((t.title for t in reversed(turns) if t.title), "")
    if args.format == "events":
        for turn in turns:
            for event in turn.events:
                out.write(event_line(event) + "\n")
    elif args.format == "steps":
        steps = recording.steps if args.turn == "all" else [s for t in turns for s in t.steps]
        for step in steps:
            out.write(step_line(step) + "\n")
    elif args.format == "transcript":
        colour = out.isatty()
        rows = [(t.number, t.user_text, t.message) for t in turns]
        for line in transcript(rows, colour=colour, title=title):
            out.write(line + "\n")
    else:
        out.write(markdown([(t.number, t.user_text, t.message) for t in turns], title=title))
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 the work failed, 2 bad input or usage)."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
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
        return 130


if __name__ == "__main__":
    sys.exit(main())
