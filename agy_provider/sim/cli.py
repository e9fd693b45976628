"""`agy-sim`: a command line argument-compatible with agy's, driving the simulator.

Owns argument parsing and one run: a headless turn, a command agy answers itself, or the
language server alone. The process it drives is `sim/session.Session` (agy's headless
behaviours); one agy for many turns (`--input-format stream-json`) runs in `sim/persistent.py`.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import threading
from collections.abc import Sequence

from agy_provider.errors import UsageError
from agy_provider.sim.commands import cli_command
from agy_provider.sim.engine import SimCrash
from agy_provider.sim.persistent import run_persistent
from agy_provider.sim.scenario import Scenario
from agy_provider.sim.scenario import load_scenario
from agy_provider.sim.session import Session
from agy_provider.sim.session import fail
from agy_provider.sim.session import parse_go_duration
from agy_provider.sim.session import resolve_model
from agy_provider.sim.state import CONVERSATION_ID
from agy_provider.sim.versions import AgyVersion
from agy_provider.sim.versions import sim_version

__all__ = ["main"]


def _parser(version: AgyVersion) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agy", description=f"Antigravity CLI {version.text} (simulated by agy-sim)"
    )
    p.add_argument("-p", "--print", dest="prompt", metavar="PROMPT", help="run one headless turn")
    p.add_argument("--model", help="model slug (see `agy models`)")
    p.add_argument("--effort", choices=list(version.efforts))
    p.add_argument("--mode", choices=["accept-edits", "plan"])
    p.add_argument("--dangerously-skip-permissions", action="store_true")
    p.add_argument("--conversation", metavar="UUID", help="resume a conversation")
    p.add_argument("-c", "--continue", dest="continue_", action="store_true")
    p.add_argument("--add-dir", action="append", default=[], metavar="DIR")
    p.add_argument("--print-timeout", default=version.default_print_timeout, metavar="DURATION")
    if version.has_output_formats:  # before 1.1.8 agy had neither flag
        p.add_argument("--output-format", choices=["text", "json", "stream-json"], default="text")
        p.add_argument("--input-format", choices=["text", "stream-json"], default="text")
    else:
        p.set_defaults(output_format="text", input_format="text")
    if version.at_least("1.2.0"):  # structured output (AGY-FORMATS §2.3)
        p.add_argument("--json-schema", metavar="SCHEMA")
    else:
        p.set_defaults(json_schema=None)
    p.add_argument("--csrf_token", help=argparse.SUPPRESS)
    p.add_argument("--gemini_dir", help=argparse.SUPPRESS)
    p.add_argument("--log-file")
    p.add_argument("--version", action="store_true")
    p.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    return p


def _models(scenario: Scenario, version: AgyVersion) -> int:
    """`agy models` in the version's format (AGY-FORMATS §2)."""
    if version.models_format == "names":  # before 1.1.5: display names, nothing to run
        lines = [m.name for m in scenario.catalog]
    elif version.models_format == "slugs":
        lines = [m.slug for m in scenario.catalog]
    else:
        lines = ["Fetching available models..."] + [f"{m.slug}\t{m.name}" for m in scenario.catalog]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _stdin_blocks() -> bool:
    """agy's `-p` reads stdin to EOF when it is a terminal or a pipe (so it hangs while open)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return sys.stdin.isatty() or stat.S_ISFIFO(mode)


def _run(args: argparse.Namespace, version: AgyVersion) -> int:
    scenario = load_scenario()
    if (
        args.input_format == "stream-json"
        and args.output_format != "stream-json"
        and version.stream_input_needs_stream_output
    ):
        fail("--input-format stream-json requires --output-format stream-json", 2)
    model = resolve_model(scenario, args.model, args.effort)
    try:
        parse_go_duration(args.print_timeout)
    except ValueError as exc:
        fail(f'invalid argument "{args.print_timeout}" for "--print-timeout" flag: {exc}')
    if args.conversation is not None and not CONVERSATION_ID.fullmatch(args.conversation):
        fail(f'invalid conversation id "{args.conversation}"')
    session = Session(args, scenario, version)
    if session.persistent:
        return run_persistent(session, model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = (
        cli_command(args.prompt)
        if args.prompt is not None and version.answers_slash_commands
        else None
    )
    if command is not None:  # agy answers it itself: no turn, no language server needed
        if _stdin_blocks():
            sys.stdin.read()
        return session.command(command, model)
    # Real agy runs every cascade inside its language server, so the server is up before the
    # turn writes its first step; wait for it the same way (bounded, in case it cannot start).
    if session.link.start():
        session.link.ready.wait(10.0)
    try:
        if session.stream and version.init_at_start and args.prompt is not None:
            session.init_event(session.planned_id(), model)  # 1.3.x: before any input (§2.3)
        if args.prompt is None:
            # No headless turn: serve the language server (RPC-driven turns) until killed.
            threading.Event().wait()
            return 0
        if _stdin_blocks():
            sys.stdin.read()
        conversation = session.conversation()
        if session.stream and not session.init_sent:
            session.init_event(conversation.id, model)
        play = session.play_for(args.prompt)
        try:
            result = session.run_turn(conversation, args.prompt, model, play)
        except SimCrash as crash:
            session.crash(crash)
        session.report(result)
        return result.exit_code
    finally:
        session.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `agy-sim` (and of `python -m agy_provider.sim.cli`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        version = sim_version()
        if argv and argv[0] == "models":
            return _models(load_scenario(), version)
        if argv and argv[0] == "record":
            from agy_provider.sim.record import record_main

            return record_main(argv[1:])
        args = _parser(version).parse_args(argv)
        if args.version:
            sys.stdout.write(version.text + "\n")
            return 0
        return _run(args, version)
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
