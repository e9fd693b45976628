"""The `conversations` subcommand: agy's saved conversations, read-only, one line (or JSON) each.

It also owns which folder holds them, which `export` reads too.
"""

from __future__ import annotations

from agy_provider.cli.conventions import EXIT_OK
from agy_provider.cli.options import add_agy_bin
from agy_provider.cli.options import add_conversations_folder
from agy_provider.cli.options import add_json

TYPE_CHECKING = False  # `typing` costs more than the rest of `--help`: mypy reads this by name
if TYPE_CHECKING:
    import argparse
    from typing import TextIO

__all__ = ["DESCRIPTION", "EXAMPLES", "HELP", "add_arguments", "conversation_folder", "run"]

HELP = "agy's saved conversations: title, date, model, turns, tokens (read-only)"
DESCRIPTION = None
EXAMPLES = ("agy-provider conversations", "agy-provider conversations --agy-bin agy-sim --json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Whose state folder (or which folder) to read, and `--json`."""
    add_agy_bin(parser, "whose state folder")
    add_conversations_folder(parser)
    add_json(parser, "one JSON object per conversation")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List agy's saved conversations, one line (or JSON object) each."""
    import json
    import time

    from agy_provider.offline.conversations import list_conversations
    from agy_provider.offline.formatters import printable

    folder = conversation_folder(args)
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


def conversation_folder(args: argparse.Namespace) -> str:
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
