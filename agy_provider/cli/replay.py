"""The `replay` subcommand: a saved agy conversation as pi events, steps, a transcript or markdown.

It imports replay and the formatters only when it runs; it never loads the live path.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.conventions import colour_for
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "replay a saved agy conversation as pi events, steps, a transcript or markdown"
DESCRIPTION = (
    "Replay a conversation database (.db, opened read-only), a JSON file of RPC steps, "
    "or an NDJSON stream-json capture; the format is detected from the content."
)
EXAMPLES = (
    "agy-provider replay fixtures/db/tool-run.db --format transcript",
    "agy-provider replay ~/.gemini/antigravity-cli/conversations/ID.db --turn all",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH, the output `--format` and which `--turn`."""
    parser.add_argument("path", metavar="PATH")
    parser.add_argument(
        "--format",
        choices=("events", "steps", "transcript", "markdown"),
        default="events",
        help="events: one pi event per line (default); steps: one normalized step per line; "
        "transcript: for people; markdown: a shareable document",
    )
    parser.add_argument("--turn", default="last", help="last (default), all, or a 1-based number")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the recording at PATH in the chosen format, turn by turn as each is replayed."""
    from agy_provider.assembly.diffs import GitBaselines
    from agy_provider.offline.formatters import event_line
    from agy_provider.offline.formatters import markdown
    from agy_provider.offline.formatters import step_line
    from agy_provider.offline.formatters import transcript
    from agy_provider.offline.replay import load_recording
    from agy_provider.offline.replay import replay

    def warn(text: str) -> None:
        print(f"warning: {text}", file=err)

    with load_recording(args.path, warn=warn) as recording:
        if not recording.turn_count:
            raise UsageError(f"{args.path} holds no turns to replay")
        # Output is written turn by turn as each is replayed, so memory stays flat. Printed
        # events never include `partial`; transcripts and markdown read only final messages.
        # Edits are diffed against HEAD of the file's repository, read as the replay goes.
        turns = replay(recording, args.turn, partials=False, baselines=GitBaselines(blocking=True))
        if args.format == "events":
            for turn in turns:
                out.writelines(event_line(event) + "\n" for event in turn.events)
        elif args.format == "steps":
            if args.turn == "all":
                out.writelines(step_line(step) + "\n" for step in recording.steps())
            else:
                for turn in turns:
                    out.writelines(step_line(step) + "\n" for step in turn.steps)
        else:
            rows = ((t.number, t.user_text, t.message) for t in turns)
            if args.format == "transcript":
                lines = transcript(rows, colour=colour_for(out), title=recording.title)
            else:
                lines = markdown(rows, title=recording.title)
            out.writelines(line + "\n" for line in lines)
    return EXIT_OK
