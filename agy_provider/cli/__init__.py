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
from agy_provider.agy.state_folder import SIMULATOR, chosen_state_folder, is_simulator
from agy_provider.errors import AgyError, AgyNotFoundError, UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import TextIO

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "colour_for",
    "main",
]

# Subcommands import what they need when they run: `--help`, `replay` and `models` never pay for
# the live path (asyncio, psutil, httpx, pluggy), and `chat` never pays for replay.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it; SIGTERM gives 143, SIGHUP 129

# What the simulator is called: any binary by this name gets a state folder of its own.


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agy-provider",
        description="Google's Antigravity CLI (agy) as a streaming model provider.",
        epilog=_examples(
            "agy-provider chat 'What is in this folder?'",
            "agy-provider chat -c 'And what would you change?'",
            "agy-provider doctor",
            "agy-provider conversations",
            "agy-provider COMMAND --help",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agy-provider {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    def command(name: str, examples: Sequence[str], **kwargs: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            epilog=_examples(*examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            **kwargs,  # type: ignore[arg-type]
        )

    rp = command(
        "replay",
        [
            "agy-provider replay fixtures/db/tool-run.db --format transcript",
            "agy-provider replay ~/.gemini/antigravity-cli/conversations/ID.db --turn all",
        ],
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

    ch = command(
        "chat",
        [
            "agy-provider chat 'What is in this folder?'",
            "agy-provider chat -c 'Now add a test for it'",
            "git diff | agy-provider chat - --system 'You review patches tersely.'",
            "agy-provider chat 'hi' --agy-bin agy-sim --format events",
        ],
        help="run one turn with agy and stream the answer",
        description=(
            "Run one turn with agy and stream it as it is written. Ctrl-C, SIGTERM and SIGHUP stop "
            "agy and its language server and end the turn as aborted. When agy asks for a "
            "permission or asks a question, you are asked on the terminal. With agy-sim as the "
            "binary, the simulator's state lives in a folder of its own (said on stderr). "
            "NO_COLOR turns colour off."
        ),
    )
    ch.add_argument("prompt", metavar="PROMPT", help="what to ask; - reads it from stdin")
    ch.add_argument(
        "-c",
        "--continue",
        dest="continue_last",
        action="store_true",
        help="continue the last chat started in this folder (its agy conversation)",
    )
    ch.add_argument(
        "--system", default="", help="a system prompt for a new conversation (ignored with -c)"
    )
    ch.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what the turn does on stderr (-vv: debug detail)",
    )
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

    ask = command(
        "ask",
        [
            "agy-provider ask 'What does this project do?' --model flash",
            "agy-provider ask 'Now fix the first one' --conversation ID --mode accept-edits",
        ],
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

    models = command(
        "models",
        ["agy-provider models", "agy-provider models --agy-bin agy-sim --json"],
        help="list the models agy offers (`agy models`), tiers folded into efforts",
    )
    models.add_argument(
        "--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)"
    )
    models.add_argument("--json", action="store_true", help="one JSON object per model")
    models.set_defaults(run=_models)

    demo = command(
        "demo",
        ["agy-provider demo", "agy-provider demo --prompt 'List the files here'"],
        help="run one demo turn with agy, or with the bundled simulator when agy is not installed",
    )
    demo.add_argument("--prompt", default="Say hello and tell me in one sentence what you can do.")
    demo.set_defaults(run=_demo)

    usage = command(
        "usage",
        [
            "agy-provider usage",
            "agy-provider usage --json",
            "AGY_SIM_VERSION=1.3.3 agy-provider usage --agy-bin agy-sim",
        ],
        help="agy's quota: each window's share left and when it resets (`agy -p /usage`)",
    )
    usage.add_argument(
        "--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)"
    )
    usage.add_argument("--json", action="store_true", help="one JSON object")
    usage.add_argument(
        "--timeout", type=float, default=60.0, help="seconds agy may take (default: 60)"
    )
    usage.set_defaults(run=_usage)

    st = command(
        "status",
        ["agy-provider status", "agy-provider status --json"],
        help="agy (found, version, signed in), settings, sessions, conversations, event sources",
    )
    st.add_argument("--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)")
    st.add_argument("--json", action="store_true", help="one JSON object")
    st.set_defaults(run=_status)

    dr = command(
        "doctor",
        ["agy-provider doctor", "agy-provider doctor --agy-bin agy-sim"],
        help="check agy, PATH, state folders, databases and agy's language server; say how to fix",
        description=(
            "Check everything a turn needs and say how to fix what fails: agy and its version, "
            "PATH, sign-in (`agy models`), the state folders, that agy's conversation databases "
            "open read-only, the language server (probed without a turn where that is possible: "
            "the simulator), and the event sources. Exit 1 when a check fails."
        ),
    )
    dr.add_argument("--agy-bin", default=None, help="the agy binary (default: AGY_BIN, then PATH)")
    dr.add_argument("--json", action="store_true", help="one JSON object per check")
    dr.set_defaults(run=_doctor)

    cf = command(
        "config",
        [
            "agy-provider config",
            "agy-provider config mode",
            "agy-provider config mode accept-edits",
            "agy-provider config --unset mode",
        ],
        help="show or change settings (config.json; environment variables override)",
    )
    cf.add_argument("key", nargs="?", metavar="KEY")
    cf.add_argument("value", nargs="?", metavar="VALUE")
    cf.add_argument("--unset", action="store_true", help="remove KEY: its default applies again")
    cf.set_defaults(run=_config)

    se = command(
        "sessions",
        [
            "agy-provider sessions",
            "agy-provider sessions clear my-session",
            "agy-provider sessions clear --all",
        ],
        help="list or forget sessions (session id → agy conversation)",
    )
    se.add_argument("action", nargs="?", choices=("list", "clear"), default="list")
    se.add_argument("session", nargs="?", metavar="SESSION", help="the session to clear")
    se.add_argument("--all", action="store_true", help="with clear: forget every session")
    se.add_argument("--json", action="store_true", help="list as JSON lines")
    se.set_defaults(run=_sessions)

    cv = command(
        "conversations",
        ["agy-provider conversations", "agy-provider conversations --agy-bin agy-sim --json"],
        help="agy's saved conversations: title, date, model, turns, tokens (read-only)",
    )
    cv.add_argument(
        "--agy-bin", default=None, help="whose state folder (default: AGY_BIN, then PATH)"
    )
    cv.add_argument("--folder", default=None, help="a conversations folder to read instead")
    cv.add_argument("--json", action="store_true", help="one JSON object per conversation")
    cv.set_defaults(run=_conversations)

    ex = command(
        "export",
        [
            "agy-provider export ./agy-export",
            "agy-provider export ./agy-export --format jsonl --jobs 4",
        ],
        help="write every saved conversation to Markdown or JSON Lines, in parallel",
        description=(
            "Write every conversation in agy's state folder to DEST/<id>.md (or .jsonl: one line "
            "per turn with pi's final message), several files at once, with a progress bar on a "
            "terminal. agy's files are only read."
        ),
    )
    ex.add_argument("dest", metavar="DEST", help="the folder to write (created if needed)")
    ex.add_argument("--format", choices=("markdown", "jsonl"), default="markdown")
    ex.add_argument("--jobs", type=int, default=None, help="files at once (default: the CPUs)")
    ex.add_argument(
        "--agy-bin", default=None, help="whose state folder (default: AGY_BIN, then PATH)"
    )
    ex.add_argument("--folder", default=None, help="a conversations folder to read instead")
    ex.set_defaults(run=_export)
    return parser


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from agy_provider.assembly.diffs import GitBaselines
    from agy_provider.offline.formatters import event_line, markdown, step_line, transcript
    from agy_provider.offline.replay import load_recording, replay

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


@contextlib.contextmanager
def _simulator_state(agy_bin: str, err: TextIO) -> Iterator[None]:
    """When the binary is the simulator, keep its conversations out of the real agy's state.

    An explicit folder (config `app_data_dir` / `AGY_APP_DATA_DIR`, or `ANTIGRAVITY_APP_DATA_DIR`)
    is honoured; otherwise the simulator's own folder becomes the turn's `app_data_dir` through the
    config's environment override, which the provider reads when the turn starts, passes to agy
    and searches for the conversation. The process environment is restored afterwards.
    """
    if not is_simulator(agy_bin):
        yield
        return
    from agy_provider.store.config import load_config

    explicit = load_config().app_data_dir or os.environ.get("ANTIGRAVITY_APP_DATA_DIR", "")
    folder = chosen_state_folder(agy_bin, explicit)
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

    from agy_provider.cli.chat import run_chat
    from agy_provider.store.config import load_config

    prompt = args.prompt
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UsageError("the prompt is empty: pass it as an argument, or pipe it in with -")
    if args.continue_last and args.session:
        raise UsageError("use either -c/--continue or --session, not both")
    if args.system and (args.continue_last or args.session):
        # A continued conversation already has its start: agy would see the text as a message.
        print("agy-provider: --system applies to a new conversation; not sent", file=err)
        args.system = ""
    _verbosity(getattr(args, "verbose", 0), err)
    agy_bin = args.agy_bin or load_config().agy_bin
    with _simulator_state(agy_bin, err):
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


def _ask(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio

    from agy_provider.hosts.ask_command import ask_command
    from agy_provider.store.config import load_config

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


def _demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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
    chat = argparse.Namespace(
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
    return _chat(chat, out, err)


def colour_for(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


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


def _usage(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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
    if args.json:
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    elif not report.buckets:
        out.write("agy reported no quota windows\n")
    else:
        width = max(len(bucket.window) for bucket in report.buckets)
        out.writelines(f"{b.window:<{width}}  {b.describe()}\n" for b in report.buckets)
    return EXIT_OK


def _status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import json

    from agy_provider.cli.health import gather_status

    status = gather_status(args.agy_bin or "")
    if args.json:
        out.write(json.dumps(status.to_json(), indent=2) + "\n")
    else:
        width = max(len(label) for label, _ in status.rows)
        out.writelines(f"{label:<{width}}  {value}\n" for label, value in status.rows)
    return EXIT_FAILED if status.problems else EXIT_OK


_MARKS = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}


def _doctor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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


def _config(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from agy_provider.store.config import (
        ENV_OVERRIDES,
        config_path,
        load_config,
        set_config_value,
    )

    if args.unset:
        if not args.key or args.value is not None:
            raise UsageError("config --unset takes one KEY")
        set_config_value(args.key, None)
        print(f"{args.key} removed from {config_path()}", file=err)
        return EXIT_OK
    if args.value is not None:
        set_config_value(args.key, args.value)
        print(f"{args.key} set in {config_path()}", file=err)
    config = load_config().to_json()
    env_of = {name: variable for variable, name in ENV_OVERRIDES.items()}
    if args.key:
        if args.key not in config:
            raise UsageError(f"config: no setting {args.key!r}; settings: {', '.join(config)}")
        out.write(f"{config[args.key]}\n")
        return EXIT_OK
    for key, value in config.items():
        variable = env_of.get(key, "")
        note = f"  (from {variable})" if variable and os.environ.get(variable) else ""
        out.write(f"{key} = {value}{note}\n")
    print(f"# {config_path()}", file=err)
    return EXIT_OK


def _sessions(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import json
    import time

    from agy_provider.store.sessions import SessionStore

    store = SessionStore()
    records = store.all()
    if args.action == "clear":
        if args.all == bool(args.session):
            raise UsageError("sessions clear takes a SESSION id, or --all")
        names = list(records) if args.all else [args.session]
        if args.session and args.session not in records:
            raise UsageError(f"no session {args.session!r} (see agy-provider sessions)")
        for name in names:
            store.delete(name)
        print(f"forgot {len(names)} session(s) in {store.path}", file=err)
        return EXIT_OK
    if not records:
        print(f"no sessions in {store.path}", file=err)
    for name, record in sorted(records.items(), key=lambda kv: -kv[1].updated_at):
        if args.json:
            out.write(json.dumps({"session": name, **record.to_json()}) + "\n")
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.updated_at))
        out.write(f"{name}\t{record.conversation_id}\t{when}\n")
    return EXIT_OK


def _conversation_folder(args: argparse.Namespace) -> str:
    if args.folder:
        return str(args.folder)
    from agy_provider.cli.health import agy_state_folder
    from agy_provider.errors import AgyNotFoundError
    from agy_provider.live.runner import find_agy
    from agy_provider.store.config import load_config

    config = load_config()
    try:
        binary = find_agy(args.agy_bin or config.agy_bin)
    except AgyNotFoundError:
        binary = args.agy_bin or config.agy_bin or "agy"
    return str(agy_state_folder(binary, config.app_data_dir) / "conversations")


def _conversations(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import json
    import time

    from agy_provider.offline.conversations import list_conversations
    from agy_provider.offline.formatters import printable

    folder = _conversation_folder(args)
    summaries = list_conversations(folder)
    if not summaries:
        print(f"no conversations in {folder}", file=err)
    for s in summaries:
        if args.json:
            out.write(json.dumps(s.to_json(), ensure_ascii=False) + "\n")
            continue
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated))
        if s.error:
            out.write(f"{s.id}  {when}  unreadable: {printable(s.error)}\n")
            continue
        title = printable(s.title or "(untitled)")
        turns = f"{s.turns} turn" + ("s" if s.turns != 1 else "")
        out.write(
            f"{s.id}  {when}  {title}  [{printable(s.model)} · {turns} · {s.tokens} tokens]\n"
        )
    return EXIT_OK


class _ProgressBar:
    """`[#####.....] 12/40` redrawn in place on a terminal; nothing elsewhere."""

    def __init__(self, err: TextIO, label: str) -> None:
        self._err = err
        self._label = label
        self._on = err.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self._on or not total:
            return
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        self._err.write(f"\r{self._label} [{bar}] {done}/{total}")
        if done == total:
            self._err.write("\n")
        self._err.flush()


def _export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from agy_provider.offline.conversations import export_conversations

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    folder = _conversation_folder(args)
    result = export_conversations(
        folder,
        args.dest,
        format=args.format,
        workers=args.jobs,
        progress=_ProgressBar(err, "exporting"),
    )
    for path, why in result.failed:
        print(f"agy-provider: could not export {path}: {why}", file=err)
    print(f"wrote {len(result.written)} file(s) to {args.dest}", file=err)
    if not result.written and not result.failed:
        print(f"(no conversations in {folder})", file=err)
    return EXIT_FAILED if result.failed else EXIT_OK


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
