"""Spawn agy for one turn and own its process tree: environment, output, termination.

agy's argv is built by `agy/argv.py` and its stdout read by `agy/stdout.py` (both re-exported
here for the live path's importers); finding the binary and asking its version are here.

No orphans: every descendant ever seen is remembered, and `terminate` ends them all (TERM, then KILL);
should the host die first, however, agy's group is ended by the lifeline (`lifeline.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO
from typing import Any

import psutil

from agy_provider import lifeline
from agy_provider.agy.argv import MAX_ARG_BYTES
from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.argv import build_argv
from agy_provider.agy.argv import go_duration
from agy_provider.agy.argv import prompt_fits_argv
from agy_provider.agy.argv import stdin_turn
from agy_provider.agy.stdout import MAX_CAPTURE_BYTES
from agy_provider.agy.stdout import StdoutEvents
from agy_provider.agy.step import StepUsage
from agy_provider.errors import AgyNotFoundError
from agy_provider.errors import TurnError
from agy_provider.live.admission import TurnAdmission
from agy_provider.live.admission import hold_until_stated
from agy_provider.store.atomic import read_json
from agy_provider.store.atomic import write_json_atomic
from agy_provider.store.sessions import default_store_path
from agy_provider.workers import off_loop

__all__ = [
    "MAX_ARG_BYTES",
    "AgyProcess",
    "StdoutEvents",
    "TurnRequest",
    "agy_version",
    "build_argv",
    "find_agy",
    "go_duration",
    "in_group",
    "process_alive",
    "prompt_fits_argv",
    "remember_tree",
    "signal_process",
    "spawn_agy",
    "stdin_turn",
]

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "Install Google's Antigravity CLI so `agy` is on your PATH, point AGY_BIN or --agy-bin at it, "
    "or try the bundled simulator with --agy-bin agy-sim."
)


def find_agy(configured: str = "") -> str:
    """The agy binary: the configured path or name (config, AGY_BIN, --agy-bin), else `agy`.

    A name is looked up on PATH, then beside this Python (where `agy-sim` is installed).
    """
    candidate = configured or "agy"
    if os.sep in candidate:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        raise AgyNotFoundError(f"{candidate} is not an executable file. {INSTALL_HINT}")
    # Beside our own interpreter too: `agy-sim` installed in the same (unactivated) venv.
    found = shutil.which(candidate) or shutil.which(candidate, path=os.path.dirname(sys.executable))
    if found is None:
        raise AgyNotFoundError(f"`{candidate}` was not found on PATH. {INSTALL_HINT}")
    return found


# agy's version by the binary's identity (real path, size, mtime): asking spawns agy, so each
# binary is asked once, and the answer is kept on disk for later processes (the CLI runs one turn).
_versions: dict[tuple[str, int, int], str] = {}
VERSIONS_FILE = "agy-versions.json"


def _identity(binary: str) -> tuple[str, int, int] | None:
    try:
        real = os.path.realpath(binary)
        info = os.stat(real)
    except OSError:
        return None
    return real, info.st_size, info.st_mtime_ns


def _versions_path() -> Path:
    return default_store_path().parent / VERSIONS_FILE


def _cached_version(key: tuple[str, int, int]) -> str | None:
    if key in _versions:
        return _versions[key]
    try:
        stored = read_json(_versions_path())
    except (OSError, ValueError):
        return None
    entry = stored.get(key[0]) if isinstance(stored, dict) else None
    if isinstance(entry, dict) and [entry.get("size"), entry.get("mtime_ns")] == list(key[1:]):
        version = entry.get("version")
        if isinstance(version, str):
            _versions[key] = version
            return version
    return None


def _store_version(key: tuple[str, int, int], version: str) -> None:
    _versions[key] = version
    path = _versions_path()
    try:
        stored = read_json(path)
        stored = stored if isinstance(stored, dict) else {}
        stored[key[0]] = {"size": key[1], "mtime_ns": key[2], "version": version}
        write_json_atomic(path, stored)
    except (OSError, ValueError) as exc:
        log.info("could not remember agy's version in %s: %s", path, exc)


async def agy_version(binary: str, *, timeout: float = 10.0) -> str:
    """`agy --version` (first line), cached by the binary's identity; "" when it cannot be learned.

    Turns that start together share one question (one process, not one per turn). The
    auto-updater is disabled for the call (AGY-FORMATS §2: `--version` may start it).
    """
    key = _identity(binary)
    if key is None:
        return await _ask_version(binary, timeout)
    known = _versions.get(key)  # asked already by this process: no trip to a worker
    cached = known if known is not None else await off_loop(_cached_version, key)
    if cached is not None:
        return cached
    asking = _asking.get(key)
    if asking is None or asking.get_loop() is not asyncio.get_running_loop():
        asking = asyncio.ensure_future(_ask_version(binary, timeout))
        _asking[key] = asking
        asking.add_done_callback(lambda _: _asking.pop(key, None))
    version = await asyncio.shield(asking)
    if version and _versions.get(key) != version:
        await off_loop(_store_version, key, version)
    return version


_asking: dict[tuple[str, int, int], asyncio.Future[str]] = {}


async def _ask_version(binary: str, timeout: float) -> str:
    # In a worker thread: a fork on the loop stalls every turn running beside this one.
    try:
        return await off_loop(_version_of, binary, timeout)
    except OSError as exc:
        log.info("could not ask %s for its version: %s", binary, exc)
        return ""


def _version_of(binary: str, timeout: float) -> str:
    """`binary --version`'s first line; whatever it leaves running (an auto-updater) is ended."""
    proc = subprocess.Popen(
        [binary, "--version"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "AGY_CLI_DISABLE_AUTO_UPDATE": "1"},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out = b""
    finally:
        # Its own process group (start_new_session), reaped a moment ago: what is left in it
        # still holds the group id, so signalling it reaches only what it left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return out.decode("utf-8", "replace").strip().splitlines()[0] if out.strip() else ""


class AgyProcess:
    """One running agy: its own process group, stdin from /dev/null, output captured (bounded)."""

    def __init__(self, request: TurnRequest) -> None:
        self.request = request
        self.argv = build_argv(request)
        self._proc: subprocess.Popen[bytes] | None = None
        self._exited = asyncio.Event()
        self._code: int | None = None  # the exit status, read without reaping (pidfd path)
        self._reaped = False
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._readers: list[asyncio.Task[None]] = []
        self._stdout_read: asyncio.Task[None] | None = None
        self._known: dict[int, psutil.Process] = {}
        self.events = StdoutEvents()
        # Set once agy stated its conversation id on stdout (stream-json `init`).
        self.id_stated = asyncio.Event()
        # Its cold start slot (`live/admission`): held from the spawn until `init` or its exit.
        self.admission = TurnAdmission()
        self._admitted: asyncio.Task[None] | None = None
        # agy's running usage total before this turn: none, each `agy -p` runs one turn.
        self.previous_total: StepUsage | None = None

    async def start(self) -> None:
        """Spawn agy once a cold start slot is free (waiting in line for one; cancelling the
        wait leaves the line); the slot is held until agy states its conversation or exits."""
        await self.admission.wait()
        ticket = self.admission.hand_over()
        assert ticket is not None
        try:
            await self._start()
        except BaseException:
            ticket.release()
            raise
        self._admitted = hold_until_stated(ticket, self.id_stated, self._exited)

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("agy has not been started")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """agy's exit code once it exited, else None."""
        if not self._exited.is_set() or self._proc is None:
            return None
        return self._proc.returncode if self._reaped else self._code

    async def _start(self) -> None:
        """Spawn agy. The fork and exec run in a worker thread (many turns starting at once
        would stall the event loop otherwise); its pipes and its exit are watched by the loop."""
        env = {**os.environ, **self.request.env}
        env.setdefault("AGY_CLI_DISABLE_AUTO_UPDATE", "1")
        # Marks everything agy runs as inside an agy-provider turn (AskAntigravity refuses to
        # recurse into another agy from there).
        env["AGY_PROVIDER_TURN"] = "1"
        # stdin stays /dev/null (an open pipe makes `agy -p` wait forever) unless the prompt
        # travels through it; then it is written whole and closed at once.
        through_stdin = not prompt_fits_argv(self.request.prompt)
        spawn = asyncio.ensure_future(
            off_loop(
                spawn_agy,
                self.argv,
                stdin=subprocess.PIPE if through_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.request.cwd,
                env=env,
                start_new_session=True,
            )
        )
        try:
            self._proc = await asyncio.shield(spawn)
        except OSError as exc:
            # Name what is missing: the turn's folder (cwd) fails with the same errno as agy.
            what = f" ({exc.filename})" if exc.filename and exc.filename != self.argv[0] else ""
            raise TurnError(f"could not start {self.argv[0]}: {exc.strerror or exc}{what}") from exc
        except asyncio.CancelledError:
            # The fork goes on in its thread: end whatever process it makes, whenever it does.
            spawn.add_done_callback(_end_abandoned)
            raise
        proc = self._proc
        assert proc.stdout is not None and proc.stderr is not None
        self._watch_exit(proc)
        if through_stdin:
            assert proc.stdin is not None
            _write_and_close(proc.stdin, stdin_turn(self.request.prompt))
        stream_json = "stream-json" in self.argv
        stdout = await _reader(proc.stdout)
        stderr = await _reader(proc.stderr)
        self._stdout_read = asyncio.create_task(
            self._read_events(stdout) if stream_json else self._drain(stdout, self._stdout)
        )
        self._readers = [self._stdout_read, asyncio.create_task(self._drain(stderr, self._stderr))]
        await self.scan_tree()

    def _watch_exit(self, proc: subprocess.Popen[bytes]) -> None:
        """Set `_exited` when agy exits: a pidfd the loop watches (Linux), else a waiting thread."""
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            fd = -1
        if fd >= 0:

            def exited() -> None:
                loop.remove_reader(fd)
                os.close(fd)
                # Read the exit status but leave agy unreaped until `terminate`: while its
                # zombie exists its pid, and so its process group id, cannot be reused, so the
                # group can still be signalled safely for whatever agy left running.
                try:
                    info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                except ChildProcessError:
                    info = None
                if info is None:
                    proc.wait()
                    self._reaped = True
                elif info.si_code == os.CLD_EXITED:
                    self._code = info.si_status
                else:
                    self._code = -info.si_status
                self._exited.set()

            loop.add_reader(fd, exited)
            return

        def wait() -> None:
            proc.wait()
            self._reaped = True
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(self._exited.set)

        threading.Thread(target=wait, name="agy-provider-wait", daemon=True).start()

    @staticmethod
    async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
        while chunk := await stream.read(65536):
            into += chunk
            if len(into) > MAX_CAPTURE_BYTES:
                del into[: len(into) - MAX_CAPTURE_BYTES]

    async def _read_events(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            if self.events.feed(chunk):
                self.id_stated.set()
        self.events.end_of_input()  # a stdout source's stream is complete

    async def finish_stdout(self, timeout: float) -> None:
        """Wait until agy's stdout is read to its end or has stated the conversation id, at most
        `timeout` seconds. Binding calls it once agy has exited: under load the loop can see the
        exit before it reads what agy printed just before it (a descendant holding the pipe open
        would keep the end from ever coming, hence the bound)."""
        reading = self._stdout_read
        if reading is None or reading.done() or self.id_stated.is_set():
            return
        stated = asyncio.ensure_future(self.id_stated.wait())
        try:
            await asyncio.wait(
                [reading, stated], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stated.cancel()

    @property
    def result(self) -> dict[str, Any] | None:
        """agy's last stream-json `result` object, if it printed one."""
        return self.events.result

    @property
    def stated_conversation_id(self) -> str:
        """The conversation id agy stated on stdout, or "" (not yet, or not stream-json)."""
        return self.events.conversation_id

    def stdout_text(self) -> str:
        """What agy printed that is not an event (all of stdout for plain text output)."""
        return (self._stdout or self.events.text).decode("utf-8", "replace")

    def stderr_text(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def track(self) -> list[psutil.Process]:
        """Remember every live descendant (and agy itself); returns the current tree."""
        if self._proc is None:
            return []
        return remember_tree(self._proc.pid, self._known)

    def tree(self) -> list[psutil.Process]:
        """agy and its live descendants (for open files and listening sockets)."""
        return self.track()

    async def scan_tree(self) -> list[psutil.Process]:
        """`tree()` in a worker thread: a scan of /proc can take a while on a busy machine."""
        return await off_loop(self.track)

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for agy to exit; returns its exit code, or None if it is still running."""
        if self._proc is None:
            return None
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except TimeoutError:
            return None
        await self._finish_readers()
        return self.returncode

    async def _finish_readers(self) -> None:
        if self._readers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._readers, return_exceptions=True), 2.0)

    async def terminate(self, grace: float = 2.0) -> None:
        """End agy and every descendant ever seen, and whatever is left in its process group
        (also after agy exited on its own): SIGTERM, then SIGKILL after `grace` seconds."""
        self.admission.release()  # a slot won for an agy that never started
        if self._proc is None:
            return
        await off_loop(self._signal_all, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline and await off_loop(self._any_alive):
            await asyncio.sleep(min(0.02, grace))
        await off_loop(self._signal_all, signal.SIGKILL)
        if not self._exited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited.wait(), 5.0)
        await self._finish_readers()
        if not self._reaped and self._exited.is_set():
            await off_loop(self._proc.wait)  # exited already: this only reaps it
            self._reaped = True
        leftovers = await off_loop(self._forget_if_gone)
        if leftovers:
            log.warning("processes still alive after SIGKILL: %s", leftovers)

    def _signal_all(self, sig: signal.Signals) -> None:
        self.track()
        for proc in self._known.values():
            if process_alive(proc):
                signal_process(proc, sig)
        # Descendants no scan saw are still in agy's process group: signal it too, but only
        # while the group provably exists (agy unreaped, or a member we know), since Linux only
        # frees a group id for reuse once its last member is gone.
        if self._proc is not None and (
            not self._reaped or any(in_group(p, self._proc.pid) for p in self._known.values())
        ):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)

    def _any_alive(self) -> bool:
        self.track()
        return any(process_alive(p) for p in self._known.values())

    def _forget_if_gone(self) -> list[int]:
        """The survivors; none left, agy's group is no longer the lifeline's to end."""
        leftovers = self.survivors()
        if not leftovers and self._proc is not None:
            lifeline.forget(self._proc.pid)
        return leftovers

    def survivors(self) -> list[int]:
        """PIDs of descendants we saw that are still alive (should be empty after terminate)."""
        return [p.pid for p in self._known.values() if process_alive(p)]


def remember_tree(pid: int, known: dict[int, psutil.Process]) -> list[psutil.Process]:
    """`pid` and its live descendants (our tree only), each remembered in `known` so that its
    end can reach them even once they left the tree; [] when `pid` is gone."""
    try:
        root = psutil.Process(pid)
        below = _descendants(root.pid)
        tree = [root, *(root.children(recursive=True) if below is None else below)]
    except psutil.Error:
        tree = []
    for proc in tree:
        known.setdefault(proc.pid, proc)
    return tree


def _descendants(pid: int) -> list[psutil.Process] | None:
    """`pid`'s descendants from Linux's `/proc/<pid>/task/<tid>/children`, reading only our tree;
    None where the kernel has no such file (then psutil's way).

    psutil's `children(recursive=True)` reads the stat file of every process on the machine to
    map parents, ~150 files while 20 turns run, holding the GIL between reads: py-spy put it at
    ~12% of the host process's CPU in the 20-turn benchmark. A process that exits meanwhile is
    simply not listed, as with psutil.
    """
    if not _PROC_CHILDREN:
        return None
    found: list[psutil.Process] = []
    seen = {pid}
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as handle:
                    listed = handle.read().split()
            except OSError:
                continue  # the thread or the process ended
            for child in map(int, listed):
                if child in seen:
                    continue
                seen.add(child)
                pending.append(child)
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(child))
    return found


_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def process_alive(proc: psutil.Process) -> bool:
    try:
        # is_running() also checks the create time, so a reused PID is not mistaken for ours.
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def spawn_agy(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """Start agy (in a session of its own) and put its process group under the lifeline, which
    ends it if this process dies without ending it (`lifeline`). In a worker thread: it forks."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **options)
    lifeline.guard(proc.pid)
    return proc


def _end_abandoned(spawn: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    """Kill the process group of an agy whose start was abandoned (an abort during the fork)."""
    if spawn.cancelled() or spawn.exception() is not None:
        return
    proc = spawn.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: start_new_session

    def reap() -> None:
        proc.wait()
        lifeline.forget(proc.pid)

    threading.Thread(target=reap, name="agy-provider-reap", daemon=True).start()


async def _reader(pipe: IO[bytes]) -> asyncio.StreamReader:
    """An asyncio reader of one of agy's pipes."""
    reader = asyncio.StreamReader(limit=MAX_CAPTURE_BYTES)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


def _write_and_close(pipe: IO[bytes], data: bytes) -> None:
    """Write a prompt to agy's stdin from a thread of its own (agy reads it at its own pace,
    and a large prompt is more than a pipe holds), then close it so agy sees the end."""

    def write() -> None:
        try:
            pipe.write(data)
        except OSError as exc:  # agy exited without reading: its exit says why
            log.info("agy did not read its prompt: %s", exc)
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    threading.Thread(target=write, name="agy-provider-stdin", daemon=True).start()


def in_group(proc: psutil.Process, pgid: int) -> bool:
    try:
        return process_alive(proc) and os.getpgid(proc.pid) == pgid
    except OSError:
        return False


def signal_process(proc: psutil.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)
