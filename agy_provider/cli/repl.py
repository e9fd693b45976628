"""`agy-provider chat` with no prompt, on a terminal: an interactive chat, turn after turn of one
conversation, each turn run and printed by `cli/chat_turn.run_chat`.

Lines are read on the main thread, with the standard `readline` where there is one (line editing,
up/down through a history kept in `chat_history` beside the session store); the turns run on one
event loop in a thread of its own that lives as long as the REPL, so the warm pool keeps the
conversation's agy between turns. Every turn continues one session: `cli:repl:<uuid>` (a new one
for each REPL and after `/new`), the folder's chat session with `-c`, or the one `--session`
names. Ctrl-C aborts a running turn (a second one stops waiting for it) and keeps the REPL; at the
prompt it clears the line, and a second Ctrl-C in a row, Ctrl-D or `/exit` leaves (exit 0).
SIGTERM and SIGHUP abort the turn and leave (exit 128+N).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import signal as signals
import sys
import termios
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Coroutine
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from types import ModuleType
from typing import Any
from typing import TextIO

from agy_provider.cli.chat_turn import ChatResult
from agy_provider.cli.chat_turn import run_chat
from agy_provider.cli.conventions import EXIT_OK
from agy_provider.errors import AgyError
from agy_provider.errors import UsageError
from agy_provider.hosts.abort_signals import ABORT_SIGNALS
from agy_provider.pi.options import AbortSignal

__all__ = [
    "COMMANDS",
    "HISTORY_FILE",
    "PROMPT",
    "ReplSettings",
    "SignalRelay",
    "TurnLoop",
    "run_repl",
]

PROMPT = "agy> "
# The history file's name, beside the session store (`store/sessions.default_store_path`).
HISTORY_FILE = "chat_history"
# Lines kept in the history file: a year of a person's questions, a few hundred KiB at most.
HISTORY_LENGTH = 1000
# How long leaving waits for the turns' epilogue (agy's tree ended, the session saved) before the
# loop ends and cancels what is left (the provider still ends agy's tree on its way out).
CLOSE_WAIT = 15.0
# And how long the loop's own end (cancelling what is left, as `asyncio.run` does) may take.
_END_WAIT = 15.0

COMMANDS: tuple[tuple[str, str], ...] = (
    ("/help", "this list"),
    (
        "/model [NAME]",
        "show the model, or use NAME for the next turns (a slug or base, as --model)",
    ),
    ("/new", "start a new conversation with the next turn"),
    ("/exit", "leave (so do Ctrl-D and a second Ctrl-C at the prompt)"),
)
_KEYS = (
    "Up/Down walk the history; Ctrl-C aborts a running turn (a second one stops waiting for it), "
    "at the prompt it clears the line; Ctrl-D leaves."
)


@dataclasses.dataclass(slots=True)
class ReplSettings:
    """What every turn of the REPL is run with; `/model` and `/new` change it between turns.

    `session` is the session the turns continue (`cli:repl:<uuid>` unless `--session` named one);
    `continue_last` continues the folder's last chat instead (`-c`). `system` goes with the first
    turn of each new conversation (`fresh`).
    """

    model: str = ""
    thinking: str | None = None
    backend: str | None = None
    cwd: str | None = None
    agy_bin: str | None = None
    system: str = ""
    session: str = ""
    continue_last: bool = False
    verbose: bool = False
    fresh: bool = True

    def new_conversation(self) -> None:
        """The next turn starts a new conversation, in a session of its own."""
        self.session = new_session_id()
        self.continue_last = False
        self.fresh = True


def new_session_id() -> str:
    """A REPL's own session: turns of two REPLs in one folder never continue each other."""
    return f"cli:repl:{uuid.uuid4()}"


class TurnLoop:
    """One event loop, on a thread of its own, for every turn of the REPL.

    `close()` lets the turns finish their epilogue (bounded by `CLOSE_WAIT`), then ends the loop
    the way `asyncio.run` ends: what is left is cancelled, and the warm pool closes its agys.
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="agy-provider-repl", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from agy_provider.live.provider import wait_for_turns

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wait_for_turns(), CLOSE_WAIT)

    def submit(
        self, work: Coroutine[Any, Any, ChatResult]
    ) -> concurrent.futures.Future[ChatResult]:
        assert self._loop is not None, "start() first"
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def call(self, func: Callable[..., object], *args: object) -> None:
        """Run `func(*args)` on the loop (from a signal handler too: it only queues)."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(func, *args)

    def close(self) -> None:
        if self._stop is not None:
            self.call(self._stop.set)
        # Bounded: a loop that cannot end is left to the process's exit (a daemon thread), and
        # agy's groups to the lifeline.
        self._thread.join(CLOSE_WAIT + _END_WAIT)


# Signals the REPL acts on, as the bytes Python's C-level handler writes to the wakeup fd.
_WATCHED = frozenset(int(s) for s in ABORT_SIGNALS)
# The signal that wakes the main thread out of a blocking call; its handler does nothing.
_POKE = signals.SIGUSR2
# The main thread is poked this often until its handler has run, for at most _POKE_FOR seconds
# (two signals in a burst run the handler once: the pokes then stop there).
_POKE_EVERY = 0.05
_POKE_FOR = 5.0


class SignalRelay:
    """Makes the main thread act on SIGINT/SIGTERM/SIGHUP at once, wherever it waits.

    Python runs a signal's handler on the main thread, once a system call there is interrupted.
    readline waits in select() and checks for signals only when select() is interrupted: a
    signal that lands just before it enters select(), or on another thread, would wait for the
    next key. Python's C handler writes every signal to the wakeup fd, from any thread; this
    thread reads it and pokes the main thread (`_POKE`) until the REPL's handler says it ran.
    """

    def __init__(self) -> None:
        self.handled = 0  # counted by the REPL's handlers, on the main thread
        # Signals that came while neither the prompt nor a turn had its handlers in place
        # (between the two): the next of them to start acts on them.
        self.pending: list[int] = []
        self._received = 0
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._main = threading.main_thread().ident or 0
        self._stopped = threading.Event()
        self._previous_fd = -1
        self._previous_poke: Any = None
        self._thread = threading.Thread(target=self._relay, name="agy-provider-repl-signals")
        self._thread.daemon = True

    def start(self) -> None:
        self._previous_poke = signals.signal(_POKE, _ignore)
        self._previous_fd = signals.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread.start()

    def close(self) -> None:
        signals.set_wakeup_fd(self._previous_fd)
        self._stopped.set()
        os.write(self._write, b"\0")  # no signal is 0: the relay's end
        self._thread.join(_POKE_FOR + 1)
        signals.signal(_POKE, self._previous_poke)
        os.close(self._read)
        os.close(self._write)

    def _relay(self) -> None:
        while not self._stopped.is_set():
            data = os.read(self._read, 64)
            if not data or 0 in data:
                return
            self._received += sum(1 for byte in data if byte in _WATCHED)
            deadline = time.monotonic() + _POKE_FOR
            while self.handled < self._received and time.monotonic() < deadline:
                signals.pthread_kill(self._main, _POKE)
                if self._stopped.wait(_POKE_EVERY):
                    return
            self._received = min(self._received, self.handled)  # a burst its handler ran once for

    def between(self, signum: int, frame: FrameType | None) -> None:
        """The REPL's handler outside the prompt and the turns: the signal waits in `pending`
        (Python's own SIGINT handler would raise KeyboardInterrupt there and end the REPL)."""
        self.handled += 1
        self.pending.append(signum)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """`_POKE`'s handler: the interrupted call is all it is for."""


class _Leave(Exception):
    """SIGTERM or SIGHUP at the prompt: leave."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _History:
    """The REPL's line history through `readline`, kept in `path` (0600); nothing without it."""

    def __init__(self, readline: ModuleType | None, path: Path) -> None:
        self._readline = readline
        self._path = path

    @classmethod
    def open(cls, err: TextIO) -> _History:
        from agy_provider.store.sessions import default_store_path

        path = default_store_path().parent / HISTORY_FILE
        try:
            import readline
        except ImportError:  # a Python built without it: plain input() still works
            return cls(None, path)
        readline.set_history_length(HISTORY_LENGTH)
        readline.set_auto_history(False)  # commands and blank lines are added by `add`
        try:
            readline.read_history_file(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            err.write(f"agy-provider: history not read from {path}: {exc}\n")
        return cls(readline, path)

    def add(self, line: str) -> None:
        rl = self._readline
        if rl is None or not line.strip():
            return
        last = rl.get_current_history_length()
        if last and rl.get_history_item(last) == line:
            return  # the same line again: one entry
        rl.add_history(line)

    def save(self, err: TextIO) -> None:
        if self._readline is None:
            return
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # Created private: what a person asks is theirs alone.
            os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            self._readline.write_history_file(self._path)
        except OSError as exc:
            err.write(f"agy-provider: history not saved to {self._path}: {exc}\n")


def run_repl(settings: ReplSettings, out: TextIO, err: TextIO) -> int:
    """Read lines and run them as turns of one conversation until the person leaves.

    Returns 0 for Ctrl-D, `/exit` or a second Ctrl-C at the prompt; 128+N when signal N
    (SIGTERM, SIGHUP) ended it.
    """
    if not settings.session and not settings.continue_last:
        settings.session = new_session_id()
    history = _History.open(err)
    relay = SignalRelay()
    relay.start()
    previous = {s: signals.signal(s, relay.between) for s in ABORT_SIGNALS}
    turns = TurnLoop()
    try:
        turns.start()
        _welcome(settings, err)
        return _read_eval_loop(settings, turns, relay, history, out, err)
    finally:
        turns.close()
        for signum, handler in previous.items():
            signals.signal(signum, handler)
        relay.close()
        history.save(err)


def _read_eval_loop(
    settings: ReplSettings,
    turns: TurnLoop,
    relay: SignalRelay,
    history: _History,
    out: TextIO,
    err: TextIO,
) -> int:
    interrupted = False  # the last thing at the prompt was a Ctrl-C
    while True:
        try:
            line = _read_line(out, relay)
        except KeyboardInterrupt:
            if interrupted:
                err.write("\n")
                return EXIT_OK
            interrupted = True
            err.write("\n(Ctrl-C again or Ctrl-D to leave)\n")
            continue
        except EOFError:
            err.write("\n")
            return EXIT_OK
        except _Leave as leave:
            err.write("\n")
            return 128 + leave.signum
        interrupted = False
        history.add(line)
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            if not _command(text, settings, err):
                return EXIT_OK
            continue
        left = _run_turn(text, settings, turns, relay, out, err)
        if left is not None:
            return 128 + left


def _read_line(out: TextIO, relay: SignalRelay) -> str:
    """One line from the person: Ctrl-C is KeyboardInterrupt (readline drops the line), Ctrl-D
    EOFError, SIGTERM/SIGHUP `_Leave`."""

    def act(signum: int) -> None:
        if signum == signals.SIGINT:
            raise KeyboardInterrupt
        raise _Leave(signum)

    def leave(signum: int, frame: FrameType | None) -> None:
        relay.handled += 1
        act(signum)

    out.flush()
    previous = {s: signals.signal(s, leave) for s in ABORT_SIGNALS}
    try:
        if relay.pending:  # one that came since the last turn ended: as if it came now
            act(relay.pending.pop(0))
        with _keys_kept_until_read(sys.stdin):
            return input(PROMPT)
    finally:
        for signum, handler in previous.items():
            signals.signal(signum, handler)


@contextlib.contextmanager
def _keys_kept_until_read(stdin: TextIO) -> Iterator[None]:
    """While readline reads a line: Ctrl-C leaves the keys typed before it to readline (NOFLSH);
    the line it interrupts, keys not yet read included, is dropped here once readline let go.

    readline sees that a key waits (select()), then reads it in a wait that retries on EINTR and
    never gives a signal's handler a turn. The terminal's Ctrl-C discards the keys not yet read:
    one landing between the two leaves readline waiting, deaf to Ctrl-C, for a key that is gone.
    """
    try:
        fd = stdin.fileno()
        before = termios.tcgetattr(fd)
        kept = list(before)
        kept[3] |= termios.NOFLSH
        termios.tcsetattr(fd, termios.TCSANOW, kept)
    except (OSError, ValueError, termios.error):  # not a terminal: no key is discarded
        yield
        return
    try:
        yield
    except KeyboardInterrupt:
        if not before[3] & termios.NOFLSH:  # else the person's own `stty noflsh` keeps them
            with contextlib.suppress(termios.error):
                termios.tcflush(fd, termios.TCIFLUSH)  # what the terminal's Ctrl-C dropped
        raise
    finally:
        with contextlib.suppress(termios.error):  # a terminal that hung up keeps no setting
            termios.tcsetattr(fd, termios.TCSANOW, before)


def _command(text: str, settings: ReplSettings, err: TextIO) -> bool:
    """Do a `/command`; False when it says to leave."""
    name, _, rest = text.partition(" ")
    rest = rest.strip()
    if name in ("/exit", "/quit"):
        return False
    if name == "/help":
        width = max(len(usage) for usage, _ in COMMANDS)
        err.writelines(f"  {usage:<{width}}  {what}\n" for usage, what in COMMANDS)
        err.write(f"  {_KEYS}\n")
    elif name == "/new":
        settings.new_conversation()
        err.write("agy-provider: the next turn starts a new conversation\n")
    elif name == "/model":
        _switch_model(rest, settings, err)
    else:
        err.write(f"agy-provider: no command {name}: /help lists them\n")
    err.flush()
    return True


def _switch_model(name: str, settings: ReplSettings, err: TextIO) -> None:
    """`/model`: say the model; `/model NAME`: check NAME as `--model` would and use it."""
    from agy_provider.agy.models import model_arguments

    if not name:
        err.write(f"agy-provider: model {settings.model or '(the configured default)'}\n")
        return
    try:
        model_arguments(name, settings.thinking or "")
    except UsageError as exc:
        err.write(f"agy-provider: {exc}\n")
        return
    settings.model = name
    err.write(f"agy-provider: the next turns use {name}\n")


def _welcome(settings: ReplSettings, err: TextIO) -> None:
    model = settings.model or "the configured default"
    err.write(f"agy-provider chat: {model}. Type a message; /help lists commands, Ctrl-D leaves.\n")
    err.flush()


def _run_turn(
    text: str,
    settings: ReplSettings,
    turns: TurnLoop,
    relay: SignalRelay,
    out: TextIO,
    err: TextIO,
) -> int | None:
    """Run `text` as the conversation's next turn; the signal that asks to leave, if any."""
    abort = AbortSignal()
    first = settings.fresh
    future = turns.submit(
        run_chat(
            text,
            model=settings.model,
            thinking=settings.thinking,
            backend=settings.backend,
            session="" if settings.continue_last else settings.session,
            continue_last=settings.continue_last,
            system=settings.system if first else "",
            cwd=settings.cwd,
            agy_bin=settings.agy_bin,
            verbose=settings.verbose,
            abort=abort,
            epilogue=False,
            out=out,
            err=err,
        )
    )
    with _signals_abort(turns, relay, abort, future, err) as received:
        result = _wait(future, err)
    if result is not None and result.message is not None:
        settings.fresh = False  # agy has the conversation now: the system prompt went with it
    out.flush()
    leaving = [s for s in received if s != signals.SIGINT]
    return leaving[0] if leaving else None


def _wait(future: concurrent.futures.Future[ChatResult], err: TextIO) -> ChatResult | None:
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        err.write("agy-provider: stopped without waiting for the turn to finish\n")
    except (UsageError, AgyError) as exc:
        err.write(f"agy-provider: {exc}\n")
    err.flush()
    return None


@contextlib.contextmanager
def _signals_abort(
    turns: TurnLoop,
    relay: SignalRelay,
    abort: AbortSignal,
    future: concurrent.futures.Future[ChatResult],
    err: TextIO,
) -> Iterator[list[int]]:
    """While a turn runs: the first of SIGINT/SIGTERM/SIGHUP aborts it (agy's tree ends, the
    turn ends `aborted`), a second stops waiting for it. Yields the signals received."""
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        relay.handled += 1
        take(signum)

    def take(signum: int) -> None:
        received.append(signum)
        if len(received) == 1:
            name = signals.Signals(signum).name
            # The echoed ^C (or the spinner) may share the line: start anew.
            err.write(f"\nagy-provider: {name} received: stopping agy…\n")
            err.flush()
            turns.call(abort.abort, f"interrupted by {name}")
        else:
            future.cancel()

    previous = {s: signals.signal(s, on_signal) for s in ABORT_SIGNALS}
    try:
        while relay.pending:  # came after the line was read, before this: for this turn
            take(relay.pending.pop(0))
        yield received
    finally:
        for signum, handler in previous.items():
            signals.signal(signum, handler)
