"""Find the conversation database our agy run writes, and prove it is ours before reading it.

Proof is the id agy states on stdout (stream-json `init`), the id we resumed, or our own process
tree's open files among the stems that appeared since spawn — never the database's content alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from typing import Protocol

import psutil

from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.database import read_conversation_id
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.contract.turn import Binding
from agy_provider.errors import DatabaseError
from agy_provider.errors import DecodeError
from agy_provider.errors import TurnError
from agy_provider.live.fswatch import FolderWatch
from agy_provider.live.fswatch import watch_folder
from agy_provider.workers import off_loop

__all__ = [
    "BindingSubject",
    "agy_log_dir",
    "bind_database",
    "conversations_dir",
    "snapshot_stems",
]

log = logging.getLogger(__name__)

# Open files cannot be watched, so without a stated id the tree is scanned, at first this often,
# backing off to OPEN_FILES_TICK_MAX.
OPEN_FILES_TICK = 0.05
OPEN_FILES_TICK_MAX = 0.8
# How long an agy printing stream-json has to state its conversation id before we look for its
# database through its open files instead (agy states it on its first line, AGY-FORMATS §2.1).
STATED_ID_GRACE = 5.0
# With a stated or known id, file notifications wake us; this tick covers a missed one.
FALLBACK_TICK = 0.25
# Once agy has exited, how long its stdout may take to be read to the id it stated. The loop can
# see the exit before the last lines agy printed (50 turns on a busy machine lost up to 40 that
# way); a descendant holding the pipe open would keep its end from coming, hence a bound.
STDOUT_DRAIN = 3.0


class BindingSubject(Protocol):
    """What binding needs of a running agy (`runner.AgyProcess` has it)."""

    @property
    def stated_conversation_id(self) -> str: ...

    @property
    def returncode(self) -> int | None: ...

    id_stated: asyncio.Event

    async def scan_tree(self) -> list[psutil.Process]: ...

    async def finish_stdout(self, timeout: float) -> None: ...


def conversations_dir(app_data_dir: str = "") -> Path:
    """agy's `conversations/` folder (`ANTIGRAVITY_APP_DATA_DIR`, else `~/.gemini/antigravity-cli`)."""
    root = app_data_dir or os.environ.get("ANTIGRAVITY_APP_DATA_DIR") or ""
    if not root:
        root = os.path.join(os.path.expanduser("~"), ".gemini", "antigravity-cli")
    return Path(root) / "conversations"


def agy_log_dir(app_data_dir: str = "") -> Path:
    """agy's `log/` folder, beside `conversations/` in its state folder."""
    return conversations_dir(app_data_dir).parent / "log"


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


def _holds_prompt(path: Path, conversation_id: str, prompt: str) -> bool:
    """Whether this (small, new) database's first USER step is `prompt` and no row names
    another conversation. Only a tie-break among databases our own tree has open: a subagent's
    conversation is opened by the same agy."""
    try:
        conn = open_conversation_db(path)
    except DatabaseError:
        return False
    try:
        meta_id = read_conversation_id(conn)
        if meta_id and meta_id != conversation_id:
            return False
        for row in iter_step_rows(conn, path=str(path)):
            try:
                step = decode_step_row(row.index, row.step_type, row.status, row.payload)
            except DecodeError:
                continue
            if step.conversation_id and step.conversation_id != conversation_id:
                return False
            if step.kind is StepKind.USER:
                return step.text == prompt
        return False
    except DatabaseError:
        return False
    finally:
        conn.close()


def _choose_opened(folder: Path, opened: set[str], prompt: str) -> str | None:
    """Among new databases our tree has open, the one that is the turn's own (not a subagent's)."""
    if len(opened) == 1:
        return next(iter(opened))
    held = [stem for stem in sorted(opened) if _holds_prompt(folder / f"{stem}.db", stem, prompt)]
    return held[0] if len(held) == 1 else None


async def bind_database(
    folder: Path,
    before: set[str],
    agy: BindingSubject,
    *,
    prompt: str,
    timeout: float,
    expected_id: str = "",
    states_id: bool = True,
) -> Binding:
    """Wait for our run's database and prove it is ours; never reads what is not.

    The conversation is the one we resumed (`expected_id`), else the one agy states on stdout.
    An agy that states nothing (older than 1.1.8) is bound through our process tree's open files:
    exactly one new stem open by it (a subagent's database, also open, is told apart by our
    prompt). Work per wake-up is a directory listing at most; rows are never decoded for a stated
    or resumed id. While agy is expected to state its id (`states_id`: it prints stream-json),
    the costly process-tree scan waits `STATED_ID_GRACE` first — with many turns in one folder,
    every turn would otherwise scan at each other turn's new database. The scan backs off.
    Once agy has exited, its stdout is read to the end (bounded, `STDOUT_DRAIN`) and every proof
    is tried once more. Raises `TurnError` when agy exits or `timeout` passes without proof.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # Made when there is something to wait for (a resumed conversation's database is there
    # already), then everything is looked at once more before the first wait: nothing that
    # appeared meanwhile is missed.
    watch: FolderWatch | None = None
    watching = False
    seen_open: set[str] = set()
    scan_from = loop.time() + (STATED_ID_GRACE if states_id else 0.0)
    scan_every = OPEN_FILES_TICK
    try:
        while True:
            # agy seen exiting: read the rest of what it printed, then look once more, by every
            # proof, before giving up (its database may well be there).
            exited = agy.returncode is not None
            if exited and states_id and not expected_id and not agy.stated_conversation_id:
                log.debug("agy exited while binding; reading the rest of its stdout")
                await agy.finish_stdout(STDOUT_DRAIN)
            target = expected_id or agy.stated_conversation_id
            if target:
                stated = agy.stated_conversation_id
                if expected_id and stated and stated != expected_id:
                    raise TurnError(
                        f"agy was asked to resume conversation {expected_id} but says it runs "
                        f"{stated}; not reading either"
                    )
                if (folder / f"{target}.db").is_file():
                    return Binding(path=folder / f"{target}.db", conversation_id=target)
            elif exited or loop.time() >= scan_from:
                new = await off_loop(snapshot_stems, folder) - before
                if new:
                    opened = await off_loop(_open_dbs, await agy.scan_tree(), folder)
                    seen_open |= opened & new
                    chosen = await off_loop(_choose_opened, folder, opened & new, prompt)
                    if chosen is not None:
                        return Binding(path=folder / f"{chosen}.db", conversation_id=chosen)
                    scan_from = loop.time() + scan_every
                    scan_every = min(scan_every * 2, OPEN_FILES_TICK_MAX)
            if exited or loop.time() >= deadline:
                break
            if not watching:
                watching = True
                watch = await watch_folder(folder, lambda name: name.endswith(".db"))
                continue
            if agy.returncode is None:  # else it exited meanwhile: the last look comes at once
                tick = FALLBACK_TICK if target else max(OPEN_FILES_TICK, scan_from - loop.time())
                await _wake(agy, watch, min(tick, FALLBACK_TICK), deadline)
    finally:
        if watch is not None:
            watch.close()
    raise TurnError(_unbound_reason(folder, expected_id, agy, seen_open, timeout))


async def _wake(
    agy: BindingSubject, watch: FolderWatch | None, tick: float, deadline: float
) -> None:
    """Sleep until agy states its id, the folder changes, or `tick` passes (never past deadline)."""
    loop = asyncio.get_running_loop()
    delay = max(0.0, min(tick, deadline - loop.time()))
    waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(asyncio.sleep(delay))]
    if not agy.id_stated.is_set():
        waits.append(asyncio.ensure_future(agy.id_stated.wait()))
    if watch is not None:
        waits.append(asyncio.ensure_future(watch.wait(delay)))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


def _unbound_reason(
    folder: Path, expected_id: str, agy: BindingSubject, seen_open: set[str], timeout: float
) -> str:
    stated = agy.stated_conversation_id
    when = "agy exited first" if agy.returncode is not None else f"not within {timeout:.0f}s"
    if expected_id or stated:
        target = expected_id or stated
        return f"conversation {target}'s database did not appear in {folder} ({when})"
    if seen_open:
        return (
            f"could not tell which new database in {folder} is this turn's ({when}); our agy "
            f"has {', '.join(sorted(seen_open))} open"
        )
    return (
        f"could not prove which database in {folder} belongs to this turn ({when}): agy did not "
        "state its conversation id (stream-json needs agy >= 1.1.8) and none of its processes "
        "was seen with a new database open"
    )
