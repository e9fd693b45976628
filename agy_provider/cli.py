"""The `agy-provider` command line: thin noun subcommands over library functions.

Each subcommand parses arguments, calls one library function, and maps typed errors to a message and exit code.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import TextIO

from agy_provider import __version__
from agy_provider.errors import AgyError, AgyNotFoundError, UsageError
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

    ch = commands.add_parser(
        "chat",
        help="run one turn with agy and stream the answer",
        description="Run one turn with agy and stream it as it is written.",
    )
    ch.add_argument("prompt", metavar="PROMPT")
    ch.add_argument("--model", default="", help="agy model slug or base (default: config)")
    ch.add_argument("--thinking", choices=("low", "medium", "high"), default=None)
    ch.add_argument("--backend", choices=("auto", "rpc", "sqlite"), default=None)
    ch.add_argument("--session", default="", help="host session id: resume its conversation")
    ch.add_argument("--cwd", default=None, help="the folder agy works in (default: here)")
    ch.add_argument("--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)")
    ch.add_argument(
        "--format",
        choices=("text", "events"),
        default="text",
        help="text: for people; events: one pi event per line, flushed as produced",
    )
    ch.set_defaults(run=_chat)

    models = commands.add_parser(
        "models", help="list the models agy offers (`agy models`), tiers folded into efforts"
    )
    models.add_argument(
        "--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)"
    )
    models.add_argument("--json", action="store_true", help="one JSON object per model")
    models.set_defaults(run=_models)

    demo = commands.add_parser(
        "demo",
        help="run one demo turn with agy, or with the bundled simulator when agy is not installed",
    )
    demo.add_argument("--prompt", default="Say hello and tell me in one sentence what you can do.")
    demo.set_defaults(run=_demo)
    return parser


def _replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    def warn(text: str) -> None:
        print(f"warning: {text}", file=err)

    with load_recording(args.path, warn=warn) as recording:
        if not recording.turn_count:
            raise UsageError(f"{args.path} holds no turns to replay")
        # Output is written turn by turn as each is replayed, so memory stays flat. Printed
        # events never include `partial`; transcripts and markdown read only final messages.
        turns = replay(recording, args.turn, partials=False)
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
                lines = transcript(rows, colour=out.isatty(), title=recording.title)
            else:
                lines = markdown(rows, title=recording.title)
            out.writelines(line + "\n" for line in lines)
    return EXIT_OK


def _chat(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # Imported here: the live path pulls in asyncio and the provider, which replay never needs.
    import asyncio

    from agy_provider.chat import run_chat

    message = asyncio.run(
        run_chat(
            args.prompt,
            model=args.model,
            thinking=args.thinking,
            backend=args.backend,
            session=args.session,
            cwd=args.cwd,
            agy_bin=args.agy_bin,
            events=args.format == "events",
            out=out,
            err=err,
        )
    )
    return EXIT_OK if message.stop_reason not in ("error", "aborted") else EXIT_FAILED


def _models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from agy_provider.agy.models import list_models
    from agy_provider.config import load_config
    from agy_provider.runner import find_agy

    for model in list_models(find_agy(args.agy_bin or load_config().agy_bin)):
        if args.json:
            row = {"id": model.id, "name": model.name, "efforts": list(model.efforts)}
            out.write(json.dumps(row) + "\n")
        else:
            efforts = f"  (effort: {', '.join(model.efforts)})" if model.efforts else ""
            out.write(f"{model.id}\t{model.name}{efforts}\n")
    return EXIT_OK


def _demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """A turn with the real agy when there is one; else, said out loud, with agy-sim."""
    from agy_provider.runner import find_agy

    try:
        agy = find_agy(os.environ.get("AGY_BIN", ""))
    except AgyNotFoundError:
        agy = ""
    state_dir = None
    if agy:
        print(f"Running a turn with {agy}.", file=err)
    else:
        agy = find_agy("agy-sim")
        state_dir = tempfile.mkdtemp(prefix="agy-provider-demo-")
        os.environ["ANTIGRAVITY_APP_DATA_DIR"] = state_dir
        print(
            "agy is not installed: using the bundled simulator agy-sim instead "
            f"(its state lives in {state_dir} and is removed afterwards).",
            file=err,
        )
    chat = argparse.Namespace(
        prompt=args.prompt,
        model="",
        thinking=None,
        backend=None,
        session="",
        cwd=None,
        agy_bin=agy,
        format="text",
    )
    try:
        return _chat(chat, out, err)
    finally:
        if state_dir is not None:
            shutil.rmtree(state_dir, ignore_errors=True)


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 the work failed, 2 bad input or usage)."""
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
        return 130


if __name__ == "__main__":
    sys.exit(main())
