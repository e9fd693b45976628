"""One warm agy: a process for many turns (AGY-FORMATS §2.4) and its lifecycle table,
`(state, event) → (new state, action)`, which its owner (the pool) fires, under its lock alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol

import psutil

from agy_provider import lifeline
from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.argv import build_warm_argv
from agy_provider.agy.stdout import MAX_CAPTURE_BYTES
from agy_provider.agy.step import StepUsage
from agy_provider.agy.streamjson_values import stream_json_usage
from agy_provider.errors import FramingError
from agy_provider.live.admission import Ticket
from agy_provider.live.runner import in_group
from agy_provider.live.runner import process_alive
from agy_provider.live.runner import remember_tree
from agy_provider.live.runner import signal_process
from agy_provider.live.runner import spawn_agy
from agy_provider.live.warm.bridge import WarmBridge
from agy_provider.live.warm.hub import HUB
from agy_provider.wire.ndjson import LineDecoder

__all__ = [
    "IDLE",
    "KILL_AFTER",
    "READ_AFTER_EXIT",
    "SPARES",
    "TRANSITIONS",
    "WarmAction",
    "WarmAgy",
    "WarmEvent",
    "WarmOwner",
    "WarmState",
    "WarmStateError",
    "WarmTurnSink",
    "transition",
]

log = logging.getLogger("agy_provider.live.warm")


class WarmState(enum.Enum):
    """Where a warm agy is in its life."""

    STARTING = "starting"  # a spare, spawned: it has not stated its conversation (`init`) yet
    SPARE = "spare"  # a spare that said `init`: idle, for the next new conversation
    IN_TURN = "in_turn"  # a turn holds it (its line sent, or about to be) until it lets go
    READY = "ready"  # idle between turns, its conversation's
    CLOSING = "closing"  # being ended (idle, the bound, settings, an abort), or exited: handled
    CLOSED = "closed"  # exited, reaped and forgotten; no longer in the pool


class WarmEvent(enum.Enum):
    """What happened to a warm agy."""

    SAID_INIT = "it stated its conversation (init)"
    LEASED = "a turn took it"
    RELEASED = "its turn ended with agy's result, agy alive"
    RETIRED = "the pool ends it"
    EXITED = "its process exited"
    GONE = "its exit is handled: reaped, its pipes and bridge closed"


class WarmAction(enum.Enum):
    """What the owner does on a move (`WarmPool.fire`)."""

    NOTHING = "nothing"
    STARTED = "its cold start slot goes back; status is told"
    TAKEN = "status is told"
    IDLE = "one more turn done, idle from now; status is told"
    END = "end its process (the one who fired, outside the pool's lock)"
    FORGET = "the pool forgets it; its slot goes back; status forgets it"


class WarmStateError(RuntimeError):
    """An event the lifecycle table has no move for in the agy's state (a bug of ours)."""


S, E, A = WarmState, WarmEvent, WarmAction
# The lifecycle. A turn may take a spare before its `init` (the line waits in agy's stdin); an
# agy dies or is ended from any live state, and its exit is handled before it is forgotten.
TRANSITIONS: Mapping[tuple[WarmState, WarmEvent], tuple[WarmState, WarmAction]] = {
    (S.STARTING, E.SAID_INIT): (S.SPARE, A.STARTED),
    (S.STARTING, E.LEASED): (S.IN_TURN, A.TAKEN),
    (S.STARTING, E.RETIRED): (S.CLOSING, A.END),
    (S.STARTING, E.EXITED): (S.CLOSING, A.NOTHING),
    (S.SPARE, E.SAID_INIT): (S.SPARE, A.NOTHING),
    (S.SPARE, E.LEASED): (S.IN_TURN, A.TAKEN),
    (S.SPARE, E.RETIRED): (S.CLOSING, A.END),
    (S.SPARE, E.EXITED): (S.CLOSING, A.NOTHING),
    (S.IN_TURN, E.SAID_INIT): (S.IN_TURN, A.STARTED),
    (S.IN_TURN, E.RELEASED): (S.READY, A.IDLE),
    (S.IN_TURN, E.RETIRED): (S.CLOSING, A.END),
    (S.IN_TURN, E.EXITED): (S.CLOSING, A.NOTHING),
    (S.READY, E.SAID_INIT): (S.READY, A.NOTHING),
    (S.READY, E.LEASED): (S.IN_TURN, A.TAKEN),
    (S.READY, E.RETIRED): (S.CLOSING, A.END),
    (S.READY, E.EXITED): (S.CLOSING, A.NOTHING),
    (S.CLOSING, E.SAID_INIT): (S.CLOSING, A.STARTED),  # it did start: its slot goes back
    (S.CLOSING, E.RELEASED): (S.CLOSING, A.NOTHING),  # a turn lets go of an agy being ended
    (S.CLOSING, E.RETIRED): (S.CLOSING, A.NOTHING),  # being ended already
    (S.CLOSING, E.EXITED): (S.CLOSING, A.NOTHING),
    (S.CLOSING, E.GONE): (S.CLOSED, A.FORGET),
    (S.CLOSED, E.SAID_INIT): (S.CLOSED, A.NOTHING),  # told late, by the thread that tells it
    (S.CLOSED, E.RELEASED): (S.CLOSED, A.NOTHING),
    (S.CLOSED, E.RETIRED): (S.CLOSED, A.NOTHING),
}


def transition(state: WarmState, event: WarmEvent) -> tuple[WarmState, WarmAction]:
    """The table's answer to `event` in `state`; `WarmStateError` naming both if it has none."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise WarmStateError(
            f"a warm agy has no move for event {event.name} in state {state.name}"
        ) from None


# Idle: between turns, or a spare whatever it said (agy < 1.3 may state its conversation only
# once it gets a line).
IDLE = frozenset({S.READY, S.SPARE, S.STARTING})
# Spares: started ahead for the next new conversation of their settings, not yet taken.
SPARES = frozenset({S.SPARE, S.STARTING})


class WarmOwner(Protocol):
    """Who moves a warm agy's state (the pool): the one place an event is fired, under its lock."""

    def fire(self, agy: WarmAgy, event: WarmEvent) -> WarmAction: ...

    def wait_closed(self, agy: WarmAgy, timeout: float | None) -> bool:
        """Until `agy` is CLOSED, at most `timeout` seconds; whether it is."""


class _Unowned:
    """The owner of an agy no pool keeps (a test's, never started): the table, no more."""

    def fire(self, agy: WarmAgy, event: WarmEvent) -> WarmAction:
        agy.state, action = transition(agy.state, event)
        return action

    def wait_closed(self, agy: WarmAgy, timeout: float | None) -> bool:
        return agy.state is S.CLOSED


class Closed:
    """`WarmAgy.exited`: whether the agy is CLOSED (its state, read), and a wait for it."""

    def __init__(self, agy: WarmAgy) -> None:
        self._agy = agy

    def is_set(self) -> bool:
        return self._agy.state is S.CLOSED

    def wait(self, timeout: float | None = None) -> bool:
        return self._agy.owner.wait_closed(self._agy, timeout)


# After SIGINT (agy writes an ERROR `result` and exits, §2.4) or stdin's end, how long agy may
# take before its tree gets SIGTERM, then SIGKILL after the same again.
KILL_AFTER = 0.5
# How long an exit's handling waits for the pipes' last bytes before it reports agy's exit.
READ_AFTER_EXIT = 2.0
# A turn's line longer than the pipe's buffer is written as agy reads it: how long one wait for
# room lasts before agy's exit is checked again.
_SEND_WAIT = 0.5


class WarmTurnSink(Protocol):
    """What a warm agy hands a turn (`warm/turn.WarmTurn`); called from the agy's threads."""

    #: The turn's host tools (`bridge/host_tools.TurnTools`) and its loop, where agy's calls go.
    tools: Any
    loop: asyncio.AbstractEventLoop | None

    def deliver(self, data: bytes, ended: bool) -> None:
        """Stdout lines of the turn (each ending in a newline); `ended`: its `result` is in."""

    def died(self, code: int) -> None:
        """agy exited before the turn's `result`."""


def _is_event(line: bytes, name: bytes) -> bool:
    # agy writes compact JSON with "event" first; a quote inside a JSON string is always escaped,
    # so this byte sequence can only be the object's own key and value.
    head = line[:40]
    return b'"event":"' + name + b'"' in head or b'"event": "' + name + b'"' in head


class WarmAgy:
    """One agy process for many turns: its own process group (guarded by the lifeline), stdin a
    pipe we write turns to, stdout read by the hub (`warm/hub`), which hands each turn its lines."""

    def __init__(
        self,
        key: str,
        template: TurnRequest,
        *,
        owner: WarmOwner | None = None,
        offered: Sequence[object] = (),
    ) -> None:
        self.key = key
        self.template = template  # the request it was started with (its log file and token)
        self.argv = build_warm_argv(template)
        # The host tools it serves from a bridge of its own (agy reads MCP servers once).
        self.offered = list(offered)
        self.bridge: WarmBridge | None = None
        self.extra_dirs: tuple[str, ...] = tuple(template.extra_dirs)  # its own bridge's too
        # Moved only by `owner.fire` (the pool's, under its lock): STARTING until it is leased.
        self.state = WarmState.STARTING
        self.owner: WarmOwner = owner if owner is not None else _Unowned()
        self.exited = Closed(self)
        self.ticket: Ticket | None = None  # its cold start slot, held until `init` or its end
        self.conversation_id = template.conversation_id
        self.turns = 0
        self.started_at = time.time()
        self.last_used = time.monotonic()
        self.exit_code: int | None = None
        # Usage totals in agy's `result` run over this process's turns (AGY-FORMATS §2.2): the
        # newest, so that the next turn's share is the difference (None before any result).
        self.last_total: StepUsage | None = None
        # The conversation's newest step index when its last turn ended (`pool.newest_index`,
        # read before that turn's end reaches its host): a turn reuses this agy only while the
        # database still ends there (another host's agy may have written since). None: unknown.
        self.seen_index: int | None = None
        self._lock = threading.Lock()  # its own data (turn, stderr, `init`), never its state
        self._proc: subprocess.Popen[bytes] | None = None
        self._turn: WarmTurnSink | None = None
        self._init_line = b""
        self._stderr = bytearray()
        self._stderr_total = 0
        self._known: dict[int, psutil.Process] = {}
        self._lines = LineDecoder()  # its stdout, framed into lines on the hub's thread
        self._pipes_done = threading.Event()  # the hub read both pipes to their end

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    @property
    def spare(self) -> bool:
        """Started ahead for the next new conversation of its settings, not taken yet."""
        return self.state in SPARES

    @property
    def _reaped(self) -> bool:
        # Until agy is reaped (just before it is CLOSED) its pid, and so its group id, is ours.
        return self.state is S.CLOSED

    # -- the process ---------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn agy (blocking: a fork; call it off the loop); the hub reads it and sees it exit."""
        if self.offered:
            self.bridge = WarmBridge(self.offered)
            self.extra_dirs = (*self.template.extra_dirs, self.bridge.start())
            self.argv = build_warm_argv(
                dataclasses.replace(self.template, extra_dirs=self.extra_dirs)
            )
        env = {**os.environ, **self.template.env}
        env.setdefault("AGY_CLI_DISABLE_AUTO_UPDATE", "1")
        env["AGY_PROVIDER_TURN"] = "1"
        try:
            self._proc = spawn_agy(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.template.cwd,
                env=env,
                start_new_session=True,
            )
        except BaseException:
            if self.bridge is not None:
                self.bridge.close()
            raise
        if self._proc.stdin is not None:
            # A turn's line is written from the loop when the pipe takes it whole (`send`).
            os.set_blocking(self._proc.stdin.fileno(), False)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        HUB.add(self, self._proc.stdout.fileno(), self._proc.stderr.fileno(), self._proc.pid)

    def send(self, line: bytes, *, block: bool = True) -> int:
        """Write one turn's line to agy's stdin; returns how much of it was written. Without
        `block` (on the loop) only what the pipe takes at once, which is all of a line that fits
        its buffer; with it (off the loop) all of it, waiting while agy reads. Raises OSError
        when agy is gone (it exited while idle)."""
        proc = self._proc
        if proc is None or proc.stdin is None or self.state in (S.CLOSING, S.CLOSED):
            raise BrokenPipeError("agy is not running")
        fd = proc.stdin.fileno()
        view = memoryview(line)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                if not block:
                    break
                with selectors.DefaultSelector() as writable:  # agy reads, then room again
                    writable.register(fd, selectors.EVENT_WRITE)
                    writable.select(_SEND_WAIT)
                if self.state in (S.CLOSING, S.CLOSED):
                    raise BrokenPipeError("agy exited while its turn was being written") from None
        return len(line) - len(view)

    def attach(self, turn: WarmTurnSink) -> None:
        """Hand agy's stdout (and its calls to the host's tools) to `turn` from now on (its
        `init`, if already said, first)."""
        with self._lock:
            self._turn = turn
            init = self._init_line
        if self.bridge is not None and turn.tools is not None and turn.loop is not None:
            self.bridge.relay_to(turn.tools, turn.loop)
            turn.tools.serve_from(self.bridge)
        if init:
            turn.deliver(init, False)

    def detach(self, turn: WarmTurnSink) -> None:
        with self._lock:
            if self._turn is turn:
                self._turn = None
        if self.bridge is not None and turn.tools is not None:
            self.bridge.stop_relaying(turn.tools)

    @property
    def stderr_total(self) -> int:
        return self._stderr_total

    def stderr_since(self, offset: int) -> str:
        """What agy wrote on stderr since `offset` (of all it wrote), as far as it is kept."""
        with self._lock:
            kept_from = self._stderr_total - len(self._stderr)
            return bytes(self._stderr[max(0, offset - kept_from) :]).decode("utf-8", "replace")

    # -- what the hub hands over (on its thread) -------------------------------------------------

    def took_stdout(self, chunk: bytes) -> None:
        self._stdout(self._lines, chunk)

    def took_stderr(self, chunk: bytes) -> None:
        self._keep_stderr(chunk)

    def pipes_closed(self) -> None:
        self._pipes_done.set()

    def _keep_stderr(self, chunk: bytes) -> None:
        with self._lock:
            self._stderr += chunk
            self._stderr_total += len(chunk)
            if len(self._stderr) > MAX_CAPTURE_BYTES:
                del self._stderr[: len(self._stderr) - MAX_CAPTURE_BYTES]

    def _stdout(self, lines: LineDecoder, chunk: bytes) -> None:
        try:
            lines.feed(chunk)
            complete = list(lines.lines())
        except FramingError as exc:  # the decoder is poisoned: the rest unread
            if exc.__cause__ is None:  # said once: a poisoned decoder's later errors chain this
                log.warning(
                    "warm agy %d: its stdout is not readable stream-json: %s", self.pid, exc
                )
            return
        batch: list[bytes] = []
        for line in complete:
            batch.append(line + b"\n")
            if _is_event(line, b"init"):
                self._init(line)
            elif _is_event(line, b"result"):
                self._total(line)
                self._hand(b"".join(batch), ended=True)
                batch = []
        if batch:
            self._hand(b"".join(batch), ended=False)

    def _init(self, line: bytes) -> None:
        try:
            stated = json.loads(line).get("conversation_id")
        except (ValueError, AttributeError, RecursionError):
            stated = None
        with self._lock:
            self._init_line = line + b"\n"
            if isinstance(stated, str) and stated:
                self.conversation_id = stated
        # Fired from a thread of its own: the hub only ever reads, and the pool's lock may be
        # held for a while (an agy spawning, its bridge starting).
        threading.Thread(
            target=self.owner.fire,
            args=(self, E.SAID_INIT),
            name=f"agy-provider-warm-{self.pid}-init",
            daemon=True,
        ).start()

    def _total(self, line: bytes) -> None:
        """The conversation's running usage total as of this `result` (the next turn's base)."""
        try:
            body = json.loads(line).get("result")
        except (ValueError, AttributeError, RecursionError):
            body = None
        if isinstance(body, dict):
            self.last_total = stream_json_usage(body.get("usage"))

    def _hand(self, data: bytes, *, ended: bool) -> None:
        with self._lock:
            turn = self._turn
            if ended:
                self._turn = None  # what follows belongs to no turn until the next attaches
        if turn is not None:
            turn.deliver(data, ended)
        elif data.strip() and not _is_event(data, b"init"):
            log.debug("warm agy %d said between turns: %r", self.pid, data[:200])

    def process_exited(self) -> None:
        """agy exited (told by the hub, on a thread of its own): its exit status (left unreaped
        so its group id stays ours), what it left running, its last words to the turn, then the
        pool forgets it."""
        proc = self._proc
        assert proc is not None
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            code = 0 if info is None else info.si_status
            if info is not None and info.si_code != os.CLD_EXITED:
                code = -info.si_status
        except ChildProcessError:
            code = proc.wait()
        self.exit_code = code
        self.owner.fire(self, E.EXITED)  # no turn takes it from now on
        self.signal_tree(signal.SIGKILL)  # what agy left in its group, and our tree
        self._pipes_done.wait(READ_AFTER_EXIT)  # the hub has read all it said
        HUB.forget(self, *(p.fileno() for p in (proc.stdout, proc.stderr) if p is not None))
        with self._lock:
            turn, self._turn = self._turn, None
        if turn is not None:
            turn.died(code)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        lifeline.forget(proc.pid)
        if self.bridge is not None:
            self.bridge.close()
        with contextlib.suppress(ChildProcessError):
            proc.wait()  # reaped last, just before it is CLOSED (`_reaped`)
        self.owner.fire(self, E.GONE)

    # -- its tree ------------------------------------------------------------------------------

    def track(self) -> list[psutil.Process]:
        """agy and its live descendants, each remembered for the end (blocking: off the loop)."""
        if self._proc is None or self._reaped:
            return []
        return remember_tree(self._proc.pid, self._known)

    def signal_tree(self, sig: signal.Signals) -> None:
        """`sig` to every descendant ever seen and to agy's group while it provably exists."""
        if self._proc is None:
            return
        self.track()
        for proc in list(self._known.values()):
            if proc.pid != self._proc.pid and process_alive(proc):
                signal_process(proc, sig)
        if not self._reaped or any(in_group(p, self._proc.pid) for p in self._known.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)

    def end(self, *, interrupt: bool, grace: float) -> None:
        """End agy (blocking). `interrupt`: mid-turn, SIGINT (agy answers an ERROR `result` and
        exits); else stdin's end (an idle agy exits). Then its tree: SIGTERM, SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        if self.bridge is not None and self.bridge.pending_calls:
            # agy waits on a call to the host's tools: answered (an error) and the bridge shut
            # before agy goes, as a one-shot turn's bridge is, so agy's MCP client ends cleanly.
            self.bridge.close()
        if not self.exited.is_set():
            if interrupt:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc.pid, signal.SIGINT)
            elif proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if not self.exited.wait(grace):
                self.signal_tree(signal.SIGTERM)
                if not self.exited.wait(KILL_AFTER):
                    self.signal_tree(signal.SIGKILL)
        self.exited.wait(KILL_AFTER + READ_AFTER_EXIT)
