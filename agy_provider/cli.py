"""The `agy-provider` command line: thin noun subcommands over library functions.

Each subcommand parses arguments, imports and calls one library function, and maps typed errors to
a message on stderr and an exit code: 0 ok, 1 the turn or work failed, 2 usage, 128+N signal N.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from agy_provider import __version__
from agy_provider.errors import AgyError, AgyNotFoundError, UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import TextIO

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

# Subcommands import what they need when they run: `--help`, `replay` and `models` never pay for
# the live path (asyncio, psutil, httpx, pluggy), and `chat` never pays for replay.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it; SIGTERM gives 143, SIGHUP 129

# What the simulator is called: any binary by this name gets a state folder of its own.
_SIMULATOR = "agy-sim"


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
        description=(
            "Run one turn with agy and stream it as it is written. Ctrl-C, SIGTERM and SIGHUP stop "
            "agy and its language server and end the turn as aborted. With agy-sim as the binary, "
            "the simulator's state lives in a folder of its own (said on stderr)."
        ),
    )
    ch.add_argument("prompt", metavar="PROMPT")
    ch.add_argument("--model", default="", help="agy model slug or base (default: config)")
    ch.add_argument("--thinking", choices=("low", "medium", "high"), default=None)
    ch.add_argument("--backend", choices=("auto", "rpc", "sqlite"), default=None)
    ch.add_argument("--session", default="", help="host session id: continue its agy conversation")
    ch.add_argument("--cwd", default=None, help="the folder agy works in (default: here)")
    ch.add_argument("--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)")
    ch.add_argument(
        "--format",
        choices=("text", "events"),
        default="text",
        help="text: for people; events: one pi event per line, flushed as produced",
    )
    ch.set_defaults(run=_chat)

    ask = commands.add_parser(
        "ask",
        help="hand one task to agy: the answer on stdout, progress on stderr",
        description=(
            "AskAntigravity from the command line: run PROMPT as one agy turn and print agy's "
            "answer on stdout, its progress (thinking, each tool run) on stderr. Exit 1 with agy's "
            "own error when the turn fails. Refuses to run inside an agy turn."
        ),
    )
    ask.add_argument("prompt", metavar="PROMPT")
    ask.add_argument("--cwd", default=None, help="the folder agy works in (default: here)")
    ask.add_argument(
        "--model", default="", help="flash, pro, sonnet, opus or a slug (default: config)"
    )
    ask.add_argument("--thinking", choices=("low", "medium", "high"), default=None)
    ask.add_argument(
        "--mode",
        choices=("plan", "accept-edits", "default"),
        default=None,
        help="plan: no changes; accept-edits: edit files without asking (default: config)",
    )
    ask.add_argument("--conversation", default=None, help="an agy conversation id to continue")
    ask.add_argument(
        "--timeout", type=float, default=None, help="seconds the turn may take (default: config)"
    )
    ask.add_argument("--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)")
    ask.add_argument(
        "--json", action="store_true", help="print the result (answer, model, usage …) as JSON"
    )
    ask.set_defaults(run=_ask)

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
    from agy_provider.formatters import event_line, markdown, step_line, transcript
    from agy_provider.replay import load_recording, replay

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


@contextlib.contextmanager
def _simulator_state(agy_bin: str, err: TextIO) -> Iterator[None]:
    """When the binary is the simulator, keep its conversations out of the real agy's state.

    An explicit folder (config `app_data_dir` / `AGY_APP_DATA_DIR`, or `ANTIGRAVITY_APP_DATA_DIR`)
    is honoured; otherwise the simulator's own folder becomes the turn's `app_data_dir` through the
    config's environment override, which the provider reads when the turn starts, passes to agy
    and searches for the conversation. The process environment is restored afterwards.
    """
    if os.path.basename(agy_bin) != _SIMULATOR:
        yield
        return
    from agy_provider.config import load_config
    from agy_provider.sim.state import simulator_state_dir

    explicit = load_config().app_data_dir or os.environ.get("ANTIGRAVITY_APP_DATA_DIR", "")
    folder = explicit or str(simulator_state_dir())
    print(f"agy-sim keeps its conversations in {folder}", file=err)
    if explicit:
        yield
        return
    previous = os.environ.get("AGY_APP_DATA_DIR")
    os.environ["AGY_APP_DATA_DIR"] = folder
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("AGY_APP_DATA_DIR", None)
        else:
            os.environ["AGY_APP_DATA_DIR"] = previous


def _chat(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # The live path (asyncio, the provider, its plugins) loads only for the commands that use it.
    import asyncio

    from agy_provider.chat import run_chat
    from agy_provider.config import load_config

    agy_bin = args.agy_bin or load_config().agy_bin
    with _simulator_state(agy_bin, err):
        result = asyncio.run(
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
    if result.signal is not None:
        return 128 + result.signal
    if result.message is None or result.message.stop_reason in ("error", "aborted"):
        return EXIT_FAILED
    return EXIT_OK


def _ask(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio

    from agy_provider.ask import ask_command
    from agy_provider.config import load_config

    agy_bin = args.agy_bin or load_config().agy_bin
    with _simulator_state(agy_bin, err):
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


def _models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import json

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
    if agy:
        print(f"Running a turn with {agy}.", file=err)
    else:
        agy = find_agy(_SIMULATOR)
        print("agy is not installed: using the bundled simulator agy-sim instead.", file=err)
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
    return _chat(chat, out, err)


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 the work failed, 2 usage, 128+N signal N)."""
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
        print("agy-provider: interrupted", file=err)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
