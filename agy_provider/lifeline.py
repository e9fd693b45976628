"""The lifeline: one small supervisor process per host that ends agy when the host dies, however.

Owns the supervisor (`python -m agy_provider.lifeline`) and the host's side of its socket: which
agy process groups it guards and which bridge folders it removes when the host is gone.

A host killed outright (SIGKILL, the OOM killer) runs none of its cleanup, and agy — in a process
group of its own, so that a turn can end its whole tree — would live on with its language server.
PR_SET_PDEATHSIG cannot stand in: it fires when the *thread* that forked exits, and agy is forked
from worker threads. So the first spawn starts a supervisor holding one end of a socket pair whose
other end only the host holds (close-on-exec, closed in forked children). The host writes one
line per agy process group to guard, and one when it ended normally; on end of input — the host
is gone, as the kernel closes its descriptors whatever killed it — or when the host's pid ends
or it stops being the supervisor's parent, the supervisor sends SIGTERM to every group still
guarded, SIGKILL after `KILL_GRACE`, removes the folders it was told of, and exits. It never
signals a group it was not told of, nor one whose leader pid now names another process (pid
reuse, told apart by create time), and it never outlives the host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from agy_provider.owned_folders import sweep_once

__all__ = ["KILL_GRACE", "drop_folder", "forget", "guard", "keep_folder", "supervisor_pid"]

log = logging.getLogger(__name__)

# Between the supervisor's SIGTERM and SIGKILL of the groups it guards: agy and its language
# server end within milliseconds of a SIGTERM when they can, and a hung one must not be waited on.
KILL_GRACE = 0.5
# The supervisor also checks this often that the host still lives, where no pidfd can tell it.
HOST_CHECK = 0.5
# A line the supervisor will read: a group id, or a folder path (PATH_MAX is 4096).
MAX_LINE = 8192

_PYTHON_ENV = frozenset(
    {"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "LANG"}
)
# A write to the supervisor waits at most this long (its socket full: a supervisor that stopped
# reading). Each message is one short line; the kernel's buffer holds thousands.
SEND_TIMEOUT = 1.0

_lock = threading.Lock()
_sock: socket.socket | None = None  # the host's end of the supervisor's socket (this process only)
_proc: subprocess.Popen[bytes] | None = None
_broken = False  # the supervisor could not be started: said once, not tried again


def guard(pgid: int) -> None:
    """Have the supervisor end process group `pgid` (an agy started in a session of its own) if
    this process dies before `forget(pgid)`. Starts the supervisor on first use (a fork: call it
    off the event loop); the first use also sweeps the temp folder of the private folders hosts
    killed together with their supervisor left (`owned_folders`)."""
    sweep_once()
    _send({"guard": pgid})


def forget(pgid: int) -> None:
    """Group `pgid` ended normally: the supervisor no longer guards it."""
    _send({"forget": pgid}, start=False)


def keep_folder(path: str) -> None:
    """Have the supervisor remove folder `path` (a bridge's config, with its token) if this
    process dies before `drop_folder(path)`."""
    _send({"folder": os.path.abspath(path)})


def drop_folder(path: str) -> None:
    """Folder `path` was removed normally."""
    _send({"drop": os.path.abspath(path)}, start=False)


def supervisor_pid() -> int | None:
    """The supervisor's pid, when this process has started one (for diagnostics and tests)."""
    return _proc.pid if _proc is not None else None


def _send(message: dict[str, Any], *, start: bool = True) -> None:
    line = (json.dumps(message) + "\n").encode("utf-8")
    with _lock:
        for attempt in range(2):  # a supervisor that went away (killed) is started again once
            if _sock is None and (not start or _broken or not _start()):
                return
            assert _sock is not None
            try:
                # MSG_NOSIGNAL: a host whose SIGPIPE is not ignored must not die of a gone peer.
                _sock.sendall(line, socket.MSG_NOSIGNAL)
                return
            except OSError as exc:
                _close()
                if attempt:
                    log.warning(
                        "agy's lifeline stopped taking work (%s): if this process is killed, "
                        "agy may outlive it",
                        exc,
                    )


def _start() -> bool:
    """Start the supervisor (holding `_lock`). False, said once, when it cannot be started."""
    global _sock, _proc, _broken
    ours, theirs = socket.socketpair()  # both close-on-exec (PEP 446)
    read_end = theirs.detach()
    # Only what Python needs to find this package: the supervisor carries none of the host's
    # settings (nothing in it names a turn's folders), and holds no folder as its cwd.
    env = {k: v for k, v in os.environ.items() if k in _PYTHON_ENV}
    try:
        _proc = subprocess.Popen(
            [sys.executable, "-m", "agy_provider.lifeline", str(os.getpid())],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            cwd="/",
            env=env,
            # Its own session: a terminal's Ctrl-C or hangup reaches the host, which ends its
            # turns itself; the supervisor waits for the host to be gone.
            start_new_session=True,
        )
    except OSError as exc:
        ours.close()
        log.warning(
            "could not start agy's lifeline (%s): if this process is killed, agy may outlive it",
            exc,
        )
        _broken = True
        return False
    finally:
        os.close(read_end)
    ours.shutdown(socket.SHUT_RD)
    ours.settimeout(SEND_TIMEOUT)  # a stuck supervisor must never stall a spawn for long
    _sock = ours
    # Reaped whenever it ends (it exits only once the host is gone, or if killed).
    threading.Thread(target=_proc.wait, name="agy-provider-lifeline", daemon=True).start()
    return True


def _close() -> None:
    global _sock
    if _sock is not None:
        with contextlib.suppress(OSError):
            _sock.close()
    _sock = None


def _forked_child() -> None:
    """A forked child (a process pool's worker) is not the host: it must not hold the socket open,
    and starts a lifeline of its own if it ever spawns agy."""
    global _proc, _broken, _lock
    _lock = threading.Lock()
    _close()
    _proc = None
    _broken = False


os.register_at_fork(after_in_child=_forked_child)


# --- the supervisor ---------------------------------------------------------------------------


class _Guarded:
    """What the supervisor was told: groups with their leader's create time, and folders."""

    def __init__(self) -> None:
        self.groups: dict[int, float | None] = {}
        self.folders: set[str] = set()

    def take(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        group = message.get("guard")
        if isinstance(group, int) and group > 1:
            self.groups[group] = _create_time(group)
        group = message.get("forget")
        if isinstance(group, int):
            self.groups.pop(group, None)
        folder = message.get("folder")
        if isinstance(folder, str) and os.path.isabs(folder):
            self.folders.add(folder)
        folder = message.get("drop")
        if isinstance(folder, str):
            self.folders.discard(folder)

    def end_all(self) -> None:
        """SIGTERM every guarded group that is still ours, SIGKILL after the grace, folders gone."""
        ours = [g for g, created in self.groups.items() if _same_leader(g, created)]
        for group in ours:
            _killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline and any(_group_exists(g) for g in ours):
            time.sleep(0.02)
        for group in ours:
            _killpg(group, signal.SIGKILL)
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _same_leader(group: int, created: float | None) -> bool:
    """Whether group `group` is still the one we were told of. While a group has members its id
    cannot be reused as a pid; a process with that pid but another create time means the group
    ended and the id was taken by someone else."""
    now = _create_time(group)
    return now is None or created is None or abs(now - created) < 0.05


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _host_watch(host: int) -> int:
    try:
        return os.pidfd_open(host)
    except (AttributeError, OSError):
        return -1


def supervise(host: int, source: int = 0) -> None:
    """The supervisor's loop: read what the host says on `source` until it is gone, then end
    everything still guarded."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    guarded = _Guarded()
    watch = _host_watch(host)
    reader = _LineReader(source, guarded)
    try:
        while True:
            if os.getppid() != host:
                break  # the host died (we were reparented), perhaps before we could watch it
            waits = [source] + ([watch] if watch >= 0 else [])
            ready, _, _ = select.select(waits, [], [], HOST_CHECK)
            if watch in ready:
                break  # the host's pid ended
            if source in ready and not reader.read():
                break  # every write end is closed: the host is gone
    finally:
        # What the host wrote before it died may still be unread: a group it guarded last.
        os.set_blocking(source, False)
        with contextlib.suppress(OSError):
            while reader.read():
                pass
        guarded.end_all()


class _LineReader:
    """Lines from the host's socket, each handed to `_Guarded.take` (a runaway line is dropped)."""

    def __init__(self, source: int, guarded: _Guarded) -> None:
        self.source = source
        self.guarded = guarded
        self.pending = b""

    def read(self) -> bool:
        """Read once; False at end of input."""
        data = os.read(self.source, 65536)
        if not data:
            return False
        *lines, self.pending = (self.pending + data).split(b"\n")
        if len(self.pending) > MAX_LINE:
            self.pending = b""
        for line in lines:
            self.guarded.take(line)
        return True


def _main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m agy_provider.lifeline HOST_PID (started by agy-provider)")
        return 2
    supervise(int(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
