"""Find the conversation database our agy run writes: snapshot/diff of `*.db` stems, then proof.

Several new databases → the one our process tree has open; every binding is confirmed by its contents.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from agy_provider.agy.database import iter_step_rows, open_conversation_db, read_conversation_id
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.errors import DatabaseError, DecodeError, TurnError

__all__ = [
    "Binding",
    "bind_database",
    "confirm_database",
    "conversations_dir",
    "snapshot_stems",
]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """The database a turn reads: its path and the conversation id it proved to hold."""

    path: Path
    conversation_id: str


def conversations_dir(app_data_dir: str = "") -> Path:
    """agy's `conversations/` folder (`ANTIGRAVITY_APP_DATA_DIR`, else `~/.gemini/antigravity-cli`)."""
    root = app_data_dir or os.environ.get("ANTIGRAVITY_APP_DATA_DIR") or ""
    if not root:
        root = os.path.join(os.path.expanduser("~"), ".gemini", "antigravity-cli")
    return Path(root) / "conversations"


def snapshot_stems(folder: Path) -> set[str]:
    """The `*.db` stems in `folder` now (empty when it does not exist yet)."""
    try:
        return {entry.name[:-3] for entry in os.scandir(folder) if entry.name.endswith(".db")}
    except FileNotFoundError:
        return set()


def _open_dbs(processes: Iterable[psutil.Process], folder: Path) -> set[str]:
    """Stems of databases in `folder` that any of `processes` has open."""
    stems: set[str] = set()
    prefix = str(folder.resolve()) + os.sep
    for proc in processes:
        try:
            files = proc.open_files()
        except psutil.Error:
            continue
        for opened in files:
            if opened.path.startswith(prefix) and opened.path.endswith(".db"):
                stems.add(os.path.basename(opened.path)[:-3])
    return stems


def confirm_database(path: Path, conversation_id: str, prompt: str = "") -> bool:
    """True when the database holds `conversation_id` (trajectory_meta and the rows' 5.20.4) and,
    when `prompt` is given, a USER step with that text. False while it is still being created.
    """
    try:
        conn = open_conversation_db(path)
    except DatabaseError:
        return False
    try:
        meta_id = read_conversation_id(conn)
        if meta_id and meta_id != conversation_id:
            return False
        seen_user = not prompt
        seen_row = False
        for row in iter_step_rows(conn, path=str(path)):
            try:
                step = decode_step_row(row.index, row.step_type, row.status, row.payload)
            except DecodeError:
                continue
            if step.conversation_id and step.conversation_id != conversation_id:
                return False
            seen_row = seen_row or bool(step.conversation_id)
            if prompt and step.kind is StepKind.USER and step.text == prompt:
                seen_user = True
        return bool(meta_id or seen_row) and seen_user
    except DatabaseError:
        return False
    finally:
        conn.close()


async def bind_database(
    folder: Path,
    before: set[str],
    tree: Callable[[], list[psutil.Process]],
    *,
    prompt: str,
    exited: Callable[[], bool],
    timeout: float,
    expected_id: str = "",
    poll: float = 0.02,
) -> Binding:
    """Wait for our run's database and prove it is ours.

    New run: exactly one new stem binds; several are narrowed to those our process tree has open;
    each candidate must then confirm (`confirm_database`, with our prompt). Resume: the known id.
    Fails closed with `TurnError` naming the candidates when nothing, or more than one, remains.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    candidates: set[str] = set()
    while True:
        if expected_id:
            candidates = {expected_id} if expected_id in snapshot_stems(folder) else set()
        else:
            candidates = snapshot_stems(folder) - before
            if len(candidates) > 1:
                opened = _open_dbs(tree(), folder) & candidates
                if opened:
                    candidates = opened
        confirmed = [
            c for c in sorted(candidates) if confirm_database(folder / f"{c}.db", c, prompt)
        ]
        if len(confirmed) == 1:
            return Binding(path=folder / f"{confirmed[0]}.db", conversation_id=confirmed[0])
        finished = exited()
        if finished or loop.time() >= deadline:
            break
        await asyncio.sleep(poll)
    what = f"conversation {expected_id}" if expected_id else "a new conversation database"
    why = "agy exited first" if exited() else f"nothing was confirmed within {timeout:.0f}s"
    named = ", ".join(sorted(candidates)) or "none"
    raise TurnError(f"could not bind {what} in {folder} ({why}); candidates: {named}")
