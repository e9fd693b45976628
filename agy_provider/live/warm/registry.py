"""What is warm, for every process to see: one small JSON file per warm agy, written by the pool of
the host that runs it, read by `agy-provider status`.

Pure file I/O and psutil, no asyncio: the pool's changes are written by one thread of its own
(`REGISTRY`); `agy-provider status` reads the files.

The folder is `<state folder of agy-provider>/warm/` (beside the session store, mode 0700); each
warm agy is one file `<host pid>-<agy pid>.json` (0600, replaced atomically) holding a `WarmEntry`
as JSON (`WarmEntry.to_json`). A file whose host or agy is gone — a pid no longer running, or
running another program (its start time differs from the one recorded) — is removed by whoever
lists the folder next, so a host killed with SIGKILL leaves nothing that lasts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import psutil

from agy_provider.store.atomic import read_json
from agy_provider.store.atomic import write_text_atomic
from agy_provider.store.sessions import default_store_path

if TYPE_CHECKING:
    from agy_provider.live.warm.agy import WarmAgy

__all__ = [
    "REGISTRY",
    "WARM_STATES",
    "RegistryWriter",
    "WarmEntry",
    "forget",
    "forget_host",
    "key_summary",
    "list_warm",
    "record",
    "rss_of",
    "start_time",
    "warm_dir",
]

log = logging.getLogger(__name__)

# The states a warm agy is in, as the pool names them (its lifecycle table is the pool's).
WARM_STATES = ("starting", "ready", "in_turn", "spare", "closing")

# `<host pid>-<agy pid>.json`: anything else in the folder (the atomic writer's temp files
# `.<name>.*.tmp`, a stranger's file) is not an entry and is left alone.
_NAME = re.compile(r"^([1-9][0-9]{0,9})-([1-9][0-9]{0,9})\.json$")

# Start times compare as recorded by psutil on this machine; a little slack covers a float's
# round trip through JSON and psutil's tick rounding.
_START_SLACK = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class WarmEntry:
    """One warm agy as its host's pool describes it.

    `key` is a short human-readable summary of the conversation key (`key_summary`);
    `conversation_id` is "" for a spare; `state` one of `WARM_STATES`; `started_at` and
    `last_used` are epoch seconds. `host_started` and `agy_started` are the processes' start
    times (psutil's `create_time`), filled in by `record` when left at None, so a reused pid is
    never taken for the process that was warm.
    """

    host_pid: int
    pid: int
    key: str
    conversation_id: str
    state: str
    started_at: float
    last_used: float
    host_started: float | None = None
    agy_started: float | None = None

    @property
    def file_name(self) -> str:
        return f"{self.host_pid}-{self.pid}.json"

    def idle_seconds(self, now: float) -> float:
        """Seconds since the entry was last used (0 while a turn runs)."""
        return 0.0 if self.state == "in_turn" else max(0.0, now - self.last_used)

    def to_json(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in _ENTRY_FIELDS}

    @classmethod
    def from_json(cls, data: Any) -> WarmEntry:
        """The entry in `data`; ValueError naming the field that is missing or wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            value: Any = data.get(field.name)
            if field.name in ("host_pid", "pid"):
                ok = type(value) is int and value > 0
            elif field.name in ("key", "conversation_id", "state"):
                ok = isinstance(value, str)
            elif field.name in ("started_at", "last_used"):
                ok = type(value) in (int, float)
            else:  # the start times: optional
                ok = value is None or type(value) in (int, float)
            if not ok:
                raise ValueError(f"field {field.name!r} is missing or not valid: {value!r}")
            numeric = field.name not in ("host_pid", "pid") and type(value) is int
            values[field.name] = float(value) if numeric else value
        return cls(**values)


_ENTRY_FIELDS = dataclasses.fields(WarmEntry)


def warm_dir() -> Path:
    """`<state folder of agy-provider>/warm`: beside the session store."""
    return default_store_path().parent / "warm"


def key_summary(*parts: str) -> str:
    """A conversation key for people: its non-empty parts joined by ` · `
    (`agy-sim · gemini-3.8-flash-medium · accept-edits · /path/cwd`)."""
    return " · ".join(part.strip() for part in parts if part and part.strip())


def record(entry: WarmEntry) -> None:
    """Write (or replace) `entry`'s file atomically; its start times are filled in from psutil
    when left at None. Raises OSError when the folder cannot be written."""
    if entry.host_started is None or entry.agy_started is None:
        entry = dataclasses.replace(
            entry,
            host_started=entry.host_started
            if entry.host_started is not None
            else start_time(entry.host_pid),
            agy_started=entry.agy_started
            if entry.agy_started is not None
            else start_time(entry.pid),
        )
    folder = warm_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Not fsynced: an entry says what runs now, and a reader checks that anyway.
    write_text_atomic(folder / entry.file_name, json.dumps(entry.to_json()), durable=False)


def forget(host_pid: int, pid: int) -> None:
    """Remove the entry of agy `pid` run by `host_pid` (nothing when there is none)."""
    with contextlib.suppress(FileNotFoundError):
        (warm_dir() / f"{int(host_pid)}-{int(pid)}.json").unlink()


def forget_host(host_pid: int) -> None:
    """Remove every entry of `host_pid` (its pool closed)."""
    for path in _entry_files():
        match = _NAME.match(path.name)
        if match and int(match.group(1)) == host_pid:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def list_warm() -> list[WarmEntry]:
    """Every warm agy of every live host, oldest first.

    Entries whose host or agy is gone (or whose pid now runs another program) are removed and
    skipped; a file that cannot be read or is not an entry is skipped with a log line (and kept:
    it may be a newer version's).
    """
    entries = []
    for path in _entry_files():
        try:
            entry = WarmEntry.from_json(read_json(path))
        except (OSError, ValueError) as exc:
            match = _NAME.match(path.name)
            if match and not _alive(int(match.group(1)), None):
                # Its host is gone (entries are not fsynced: a crash may leave one empty).
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            log.warning("skipping warm-agy entry %s: %s", path, exc)
            continue
        if path.name != entry.file_name:
            log.warning("skipping warm-agy entry %s: it describes %s", path, entry.file_name)
            continue
        if not (
            _alive(entry.host_pid, entry.host_started) and _alive(entry.pid, entry.agy_started)
        ):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        entries.append(entry)
    return sorted(entries, key=lambda e: (e.started_at, e.host_pid, e.pid))


def rss_of(pid: int) -> int | None:
    """The resident memory of `pid` in bytes, or None when it cannot be read (gone, not ours)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


def _entry_files() -> list[Path]:
    try:
        return [p for p in warm_dir().iterdir() if _NAME.match(p.name)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot read the warm-agy folder %s: %s", warm_dir(), exc)
        return []


def start_time(pid: int) -> float | None:
    """When `pid` started (psutil's `create_time`), or None when it cannot be read."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def _alive(pid: int, started: float | None) -> bool:
    """`pid` runs, is not a zombie, and (when known) is the process that started at `started`."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) <= _START_SLACK
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        # Another user's process (access denied) still runs: only a missing one is gone.
        return psutil.pid_exists(pid)


# How long the registry's writer gathers changes before it writes them.
_REGISTRY_COALESCE = 0.25


class RegistryWriter:
    """Tells other processes what is warm (this module's files, read by `agy-provider status`):
    each change is queued and written by one thread of its own, newest state per agy, so no
    turn waits for a file to be written."""

    def __init__(self) -> None:
        self._due: dict[int, WarmAgy | None] = {}  # agy pid -> what to write (None: forget it)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def changed(self, agy: WarmAgy, *, gone: bool = False) -> None:
        if not agy.pid:
            return
        with self._lock:
            self._due[agy.pid] = None if gone else agy
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write, name="agy-provider-warm-registry", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _write(self) -> None:
        host = os.getpid()
        # Start times, read once per process (psutil reads /proc twice for each).
        started: dict[int, float | None] = {host: start_time(host)}
        while True:
            self._wake.wait()
            # Changes close together go in one write per agy: a short turn's `in_turn` and
            # `ready`, fifty turns starting at once (status may lag by this much).
            time.sleep(_REGISTRY_COALESCE)
            self._wake.clear()
            with self._lock:
                due, self._due = self._due, {}
            for pid, agy in due.items():
                try:
                    if agy is None:
                        started.pop(pid, None)
                        forget(host, pid)
                        continue
                    if started.get(pid) is None:
                        started[pid] = start_time(pid)
                    entry = _entry(host, agy)
                    record(
                        dataclasses.replace(
                            entry, host_started=started[host], agy_started=started[pid]
                        )
                    )
                except OSError as exc:
                    log.debug("the warm registry could not be written: %s", exc)

    def forget_all(self) -> None:
        """This host's entries go (the pool has ended every agy); blocking, at exit."""
        with self._lock:
            self._due.clear()
        with contextlib.suppress(OSError):
            forget_host(os.getpid())


def _entry(host: int, agy: WarmAgy) -> WarmEntry:
    template = agy.template
    state = "spare" if agy.spare else agy.state.value
    return WarmEntry(
        host_pid=host,
        pid=agy.pid,
        key=key_summary(
            os.path.basename(template.agy_bin),
            " ".join(a for a in template.model_args if not a.startswith("--")),
            template.mode if template.mode != "default" else "",
            "skip permissions" if template.skip_permissions else "",
            os.path.abspath(template.cwd),
        ),
        conversation_id="" if agy.spare else agy.conversation_id,
        state=state,
        started_at=agy.started_at,
        last_used=time.time() - (time.monotonic() - agy.last_used),
    )


REGISTRY = RegistryWriter()
