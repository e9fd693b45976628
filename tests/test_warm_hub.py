"""The hub (`live/warm/hub.py`): one thread reads every warm agy's pipes and sees each exit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from agy_provider.live.warm.hub import WarmHub

SAYS = "import sys, time; print('out', flush=True); print('err', file=sys.stderr, flush=True)"


class Member:
    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.out = b""
        self.err = b""
        self.closed = threading.Event()
        self.gone = threading.Event()

    def took_stdout(self, chunk: bytes) -> None:
        if self.broken:
            raise RuntimeError("a bug in what handles this agy's lines")
        self.out += chunk

    def took_stderr(self, chunk: bytes) -> None:
        self.err += chunk

    def pipes_closed(self) -> None:
        self.closed.set()

    def process_exited(self) -> None:
        self.gone.set()


def child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def hubs() -> int:
    return [t.name for t in threading.enumerate()].count("agy-provider-warm-hub")


def test_every_member_is_read_to_its_end_and_told_of_its_exit() -> None:
    before = hubs()
    hub = WarmHub()
    procs = [child(f"{SAYS}; time.sleep(0.{n})") for n in range(1, 6)]
    members = [Member() for _ in procs]
    for member, proc in zip(members, procs, strict=True):
        assert proc.stdout is not None and proc.stderr is not None
        hub.add(member, proc.stdout.fileno(), proc.stderr.fileno(), proc.pid)
    for member in members:
        assert member.closed.wait(10) and member.gone.wait(10)
        assert (member.out, member.err) == (b"out\n", b"err\n")
    assert hubs() == before + 1  # five processes, one reader
    for proc in procs:
        proc.wait(5)


def test_a_member_whose_output_fails_is_dropped_and_the_others_go_on() -> None:
    hub = WarmHub()
    bad, good = Member(broken=True), Member()
    slow = f"{SAYS}; time.sleep(0.3); print('later', flush=True)"
    procs = [child(slow), child(slow)]
    for member, proc in zip((bad, good), procs, strict=True):
        assert proc.stdout is not None and proc.stderr is not None
        hub.add(member, proc.stdout.fileno(), proc.stderr.fileno(), proc.pid)
    assert bad.closed.wait(10)  # dropped: its exit's handling need not wait for its pipes
    assert good.gone.wait(10) and good.closed.wait(10)
    assert good.out == b"out\nlater\n"
    assert bad.gone.wait(10)  # its exit is still seen
    for proc in procs:
        proc.wait(5)


def test_forget_stops_reading_before_the_owner_closes_the_pipes() -> None:
    hub = WarmHub()
    member = Member()
    proc = child("import time; time.sleep(5)")
    try:
        assert proc.stdout is not None and proc.stderr is not None
        hub.add(member, proc.stdout.fileno(), proc.stderr.fileno(), proc.pid)
        started = time.monotonic()
        hub.forget(member, proc.stdout.fileno(), proc.stderr.fileno())
        assert time.monotonic() - started < 2  # the hub answered at once
        proc.stdout.close()
        proc.stderr.close()
        # A new pipe may take a closed descriptor's number: the hub reads it for its new owner.
        other = Member()
        again = child(SAYS)
        assert again.stdout is not None and again.stderr is not None
        hub.add(other, again.stdout.fileno(), again.stderr.fileno(), again.pid)
        assert other.closed.wait(10) and other.out == b"out\n"
        again.wait(5)
    finally:
        proc.kill()
        proc.wait(5)
