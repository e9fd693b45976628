"""One thread reads every warm agy's pipes and notices its exit, whatever loop its turns run on.

A warm agy outlives the loop of the turn that started it, so its output cannot be read by a loop;
a thread per agy (two, with its exit) made fifty agys a hundred threads, each waking and taking
the interpreter for every line, and the host's loop waited behind them. The hub is one selector
over all of them: stdout, stderr and, on Linux, a pidfd per agy (where there is none, a thread
waits for that agy's exit). An exit is handled in a short thread of its own (it signals a tree
and may wait for the pipes' last bytes), never on the hub, which only ever reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["HUB", "HubMember", "WarmHub"]

log = logging.getLogger(__name__)

# One read's bound: a pipe holds at most this much at once on Linux.
_CHUNK = 65536
# How long `forget` waits for the hub (which only ever reads: a moment).
_FORGET_WAIT = 5.0


class HubMember(Protocol):
    """What the hub reads for (`warm/agy.WarmAgy`); called on the hub's thread."""

    def took_stdout(self, chunk: bytes) -> None: ...

    def took_stderr(self, chunk: bytes) -> None: ...

    def pipes_closed(self) -> None:
        """Both pipes reached their end."""

    def process_exited(self) -> None:
        """The process exited (called once, on a thread of its own: it may block)."""


class WarmHub:
    """The selector thread; started with the first member, a daemon (the pool ends the agys)."""

    def __init__(self) -> None:
        self._selector: selectors.BaseSelector | None = None
        self._lock = threading.Lock()
        self._pending: list[Callable[[selectors.BaseSelector], None]] = []
        self._wake_r, self._wake_w = -1, -1
        self._open: dict[int, int] = {}  # id(member) -> its pipes not yet at their end

    def add(self, member: HubMember, stdout: int, stderr: int, pid: int) -> None:
        """Read `stdout` and `stderr` for `member` and tell it when `pid` exits."""
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
            pidfd = -1
            threading.Thread(
                target=_wait_then, args=(pid, member.process_exited), name=f"agy-provider-warm-{pid}-exit",
                daemon=True,
            ).start()

        def register(selector: selectors.BaseSelector) -> None:
            self._open[id(member)] = 2
            selector.register(stdout, selectors.EVENT_READ, (member, "out"))
            selector.register(stderr, selectors.EVENT_READ, (member, "err"))
            if pidfd >= 0:
                selector.register(pidfd, selectors.EVENT_READ, (member, "exit"))

        self._call(register)

    def forget(self, member: HubMember, *fds: int) -> None:
        """Stop reading `fds` (blocking, at most a moment): before their owner closes them, so
        the selector never holds a descriptor that is closed, or reused by another agy."""
        done = threading.Event()

        def drop(selector: selectors.BaseSelector) -> None:
            for fd in fds:
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(fd)
            self._open.pop(id(member), None)
            done.set()

        self._call(drop)
        done.wait(_FORGET_WAIT)

    def _call(self, change: Callable[[selectors.BaseSelector], None]) -> None:
        with self._lock:
            self._pending.append(change)
            if self._selector is None:
                self._selector = selectors.DefaultSelector()
                self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                self._selector.register(self._wake_r, selectors.EVENT_READ, None)
                threading.Thread(
                    target=self._run, args=(self._selector,), name="agy-provider-warm-hub",
                    daemon=True,
                ).start()
            with contextlib.suppress(BlockingIOError):  # a wake is pending already
                os.write(self._wake_w, b"\0")

    def _run(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                self._serve(selector)
            except Exception:  # a bug of ours must not leave every warm agy unread
                log.exception("the warm agys' reader failed on one event; it goes on")

    def _serve(self, selector: selectors.BaseSelector) -> None:
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    self._changes(selector)
                    continue
                member, what = key.data
                if what == "exit":
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    threading.Thread(
                        target=member.process_exited, name="agy-provider-warm-exited", daemon=True
                    ).start()
                    continue
                try:
                    chunk = os.read(key.fd, _CHUNK)
                except OSError:  # closed under us (the agy was ended): its end
                    chunk = b""
                if not chunk:
                    selector.unregister(key.fd)
                    left = self._open.get(id(member), 1) - 1
                    self._open[id(member)] = left
                    if not left:
                        del self._open[id(member)]
                        member.pipes_closed()
                    continue
                try:
                    if what == "out":
                        member.took_stdout(chunk)
                    else:
                        member.took_stderr(chunk)
                except Exception:  # a bug of ours: that agy goes unread, never the others
                    log.exception("a warm agy's output could not be handled; it is read no more")
                    self._drop(selector, member)

    def _drop(self, selector: selectors.BaseSelector, member: HubMember) -> None:
        for key in list(selector.get_map().values()):
            if key.data is not None and key.data[0] is member and key.data[1] != "exit":
                selector.unregister(key.fd)
        self._open.pop(id(member), None)
        member.pipes_closed()

    def _changes(self, selector: selectors.BaseSelector) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        with self._lock:
            changes, self._pending = self._pending, []
        for change in changes:
            try:
                change(selector)
            except (OSError, ValueError, KeyError) as exc:  # a pipe already closed, say
                log.warning("the warm agys' reader could not follow a change: %s", exc)


def _wait_then(pid: int, then: Callable[[], None]) -> None:
    # Without a pidfd: wait for the exit (left unreaped, as the pidfd leaves it), then say so.
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    then()


HUB = WarmHub()
