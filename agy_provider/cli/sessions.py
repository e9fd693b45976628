"""The `sessions` subcommand: list or forget host sessions (session id -> agy conversation).

Only the provider's own session store is written; agy's files are never touched.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.options import add_json
from agy_provider.errors import UsageError

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "run"]

HELP = "list or forget sessions (session id → agy conversation)"
DESCRIPTION = None
EXAMPLES = (
    "agy-provider sessions",
    "agy-provider sessions clear my-session",
    "agy-provider sessions clear --all",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`list` or `clear` (one SESSION, or `--all`), and `--json`."""
    parser.add_argument("action", nargs="?", choices=("list", "clear"), default="list")
    parser.add_argument("session", nargs="?", metavar="SESSION", help="the session to clear")
    parser.add_argument("--all", action="store_true", help="with clear: forget every session")
    add_json(parser, "list as JSON lines")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List the sessions, most recently updated first, or forget one (or all)."""
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
