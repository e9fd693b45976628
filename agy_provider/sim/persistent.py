"""One agy for many turns: `--input-format stream-json` without `-p` (AGY-FORMATS §2.3, §2.4).

Owns the persistent process's life: its cold start, then `init` before any stdin is read; one
turn per stdin line (what a line means is `sim/stream_input.py`'s), each in a worker thread
while the main thread waits for it or for a signal; stdin's end (exit after the last `result`),
SIGINT/SIGTERM (mid-turn: a `result` ERROR `context canceled`, exit 1; idle: exit 1, nothing
printed) and the crash-between-turns fault. The contract is written out in `sim/CONTRACT.md`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING
from typing import NoReturn

from agy_provider.sim.engine import Conversation
from agy_provider.sim.engine import SimCrash
from agy_provider.sim.engine import TurnResult
from agy_provider.sim.scenario import CatalogModel
from agy_provider.sim.scenario import Scenario
from agy_provider.sim.scenario import Usage
from agy_provider.sim.stream_input import Refused
from agy_provider.sim.stream_input import Skipped
from agy_provider.sim.stream_input import read_input_line

if TYPE_CHECKING:
    from agy_provider.sim.session import Session

__all__ = ["CANCELED", "run_persistent"]

CANCELED = "context canceled"  # agy's `result.error` for a turn a signal ended (§2.4)
# After a signal mid-turn, how long the engine may take to mark its running step CANCELED
# before the `result` is printed anyway: agy answers a signal at once.
_CANCEL_GRACE = 0.02
# How often the main thread wakes while a turn runs. Linux gives a process's signal to the main
# thread while it sleeps in a wait, so this only bounds the odd case of another thread taking
# it (its Python handler then runs at the main thread's next wake).
_WAKE = 0.05
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_IDLE_CRASH = (
    "panic: runtime error: invalid memory address or nil pointer dereference\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x30 pc=0x1d0a2c4]\n\n"
    "goroutine 41 [running]:\n"
    "google3/third_party/jetski/cli/stream.(*InputLoop).next(...)"
)


class _Signaled(BaseException):
    """Raised in the main thread by the SIGINT/SIGTERM handler (a BaseException, like
    KeyboardInterrupt, so no `except Exception` on the way swallows it)."""


@dataclasses.dataclass
class _Running:
    conversation: Conversation
    started: float
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: TurnResult | None = None
    error: BaseException | None = None


class _Persistent:
    """The main thread's loop. Signals raise `_Signaled` wherever it waits, except while it
    writes a line (`_writing`): then the signal is noted and raised once the line is out."""

    def __init__(self, session: Session, model: CatalogModel) -> None:
        self.s = session
        self.model = model
        self.conversation: Conversation | None = None
        self.running: _Running | None = None
        self._signaled = 0
        self._writes = 0

    # --- signals ---------------------------------------------------------------------------

    def handle_signals(self) -> None:
        for number in _SIGNALS:
            signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        self._signaled = number
        if not self._writes:
            raise _Signaled

    @contextmanager
    def _writing(self) -> Iterator[None]:
        self._writes += 1
        try:
            yield
        finally:
            self._writes -= 1
        if self._signaled and not self._writes:
            raise _Signaled

    # --- the process -----------------------------------------------------------------------

    def run(self, started: float) -> int:
        """Cold start, `init`, then turns until stdin ends; returns the exit code."""
        s = self.s
        if s.link.start():
            s.link.ready.wait(10.0)  # agy's language server is up before its first turn
        s.cold_start(started)  # counted from the start, so the server's own start is in it
        conversation_id = s.planned_id()  # may refuse an unknown id (1.1.x) or fork it (1.2+)
        if s.stream:
            with self._writing():
                s.init_event(conversation_id, self.model)
        return self._serve()

    def _serve(self) -> int:
        code = 0
        while True:
            raw = sys.stdin.buffer.readline()
            if not raw:
                return code  # stdin ended: every turn read has printed its result
            item = read_input_line(raw, self.s.version)
            if isinstance(item, Skipped):
                if item.warning:
                    with self._writing():
                        sys.stderr.write(item.warning + "\n")
                        sys.stderr.flush()
                continue
            if isinstance(item, Refused):
                with self._writing():
                    self.s.report(self._refusal(item))
                return item.exit_code
            result, scenario = self._turn(item.text)
            with self._writing():
                self.s.report(result)
            code = result.exit_code
            if scenario.faults.crash_between_turns_ms is not None:
                self._crash_between_turns(scenario)

    def _turn(self, text: str) -> tuple[TurnResult, Scenario]:
        s = self.s
        if self.conversation is None:
            self.conversation = s.open_conversation()
        play = s.play_for(text)
        running = _Running(self.conversation, time.monotonic())

        def work() -> None:
            try:
                running.result = s.run_turn(running.conversation, text, self.model, play)
            except SimCrash as crash:
                s.crash(crash)
            except BaseException as exc:  # handed to the main thread, which raises it
                running.error = exc
            finally:
                running.done.set()

        self.running = running
        threading.Thread(target=work, name="agy-sim-turn", daemon=True).start()
        while not running.done.wait(_WAKE):
            pass
        self.running = None
        if running.error is not None:
            raise running.error
        assert running.result is not None
        return running.result, play.scenario if play is not None else s.scenario

    def _refusal(self, refused: Refused) -> TurnResult:
        """The `result` of a line agy will not run: the conversation's totals so far."""
        s, conversation = self.s, self.conversation
        result = TurnResult(
            s.planned_id(),
            status="ERROR",
            error=refused.error,
            exit_code=refused.exit_code,
            num_turns=conversation.turns if conversation is not None else 0,
            version=s.version,
        )
        if conversation is not None and s.version.new_stream_shapes:
            result.usage = conversation.usage_total
            result.duration_seconds = conversation.duration_total
        return result

    def _crash_between_turns(self, scenario: Scenario) -> NoReturn:
        faults = scenario.faults
        idle = faults.crash_between_turns_ms or 0
        time.sleep(self.s.sim.clock.real(idle / 1000))  # idle: a signal here exits as idle
        self._writes += 1  # dying: a signal now changes nothing
        self.s.crash(SimCrash(faults.crash_exit_code, faults.crash_message or _IDLE_CRASH))

    # --- endings ---------------------------------------------------------------------------

    def interrupted(self) -> NoReturn:
        """SIGINT/SIGTERM: mid-turn, agy's `context canceled` result and exit 1; idle, exit 1."""
        self._writes += 1  # a second signal while we end changes nothing
        s, running = self.s, self.running
        if running is None:
            s.state.log(f"signal {self._signaled} while idle: exiting")
            self._exit(1)
        with s.out:
            s.muted = True  # the turn's later lines would come after its result
        s.sim.cancel(running.conversation.id)  # its running step ends CANCELED, if in time
        running.done.wait(_CANCEL_GRACE)
        result = self._canceled(running)
        with s.out:
            s.muted = False
            s.report(result)
            s.muted = True
        s.state.log(f"signal {self._signaled} mid-turn: {CANCELED}")
        self._exit(1)

    def _canceled(self, running: _Running) -> TurnResult:
        s, conversation = self.s, running.conversation
        ended = running.result if running.done.is_set() else None
        result = TurnResult(
            conversation.id,
            status="ERROR",
            error=CANCELED,
            exit_code=1,
            num_turns=conversation.turns,
            version=s.version,
        )
        if ended is not None:  # the engine settled the cancel: its totals include this turn
            result.usage, result.duration_seconds = ended.usage, ended.duration_seconds
        elif s.version.new_stream_shapes:
            elapsed = time.monotonic() - running.started
            result.usage = conversation.usage_total
            result.duration_seconds = conversation.duration_total + elapsed
        else:
            result.usage = Usage()
            result.duration_seconds = time.monotonic() - running.started
        return result

    def _exit(self, code: int) -> NoReturn:
        """Exit now, the language server with us; the turn's thread and rows stay as they are."""
        with self.s.out:
            sys.stdout.flush()
            sys.stderr.flush()
            self.s.link.close()
            os._exit(code)


def run_persistent(session: Session, model: CatalogModel) -> int:
    """Run `session` as one agy for many turns; returns its exit code (or never returns)."""
    process = _Persistent(session, model)
    started = time.monotonic()
    process.handle_signals()
    try:
        return process.run(started)
    except _Signaled:
        process.interrupted()
    finally:
        for number in _SIGNALS:  # cleanup is short; a signal now ends it as agy's default would
            signal.signal(number, signal.SIG_DFL)
        session.close()
