"""One interactive turn for the command line: run it through `stream_simple` and print it live.

People get text (thinking dimmed, a spinner while agy warms up); machines get pi events, flushed.
SIGINT, SIGTERM and SIGHUP abort the turn (agy's whole tree is ended) and the turn still ends with
its `aborted` error event; a second signal stops waiting for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import os
import select
import sys
import threading
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn
from typing import TextIO

from agy_provider.hookspecs import hookimpl
from agy_provider.hosts.abort_signals import abort_on_signals
from agy_provider.live.provider import stream_simple
from agy_provider.offline.formatters import LivePrinter
from agy_provider.offline.formatters import event_line
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import get_plugin_manager

if TYPE_CHECKING:
    from agy_provider.agy.step import PermissionRequest
    from agy_provider.agy.step import Question
    from agy_provider.agy.step import Step
    from agy_provider.contract.turn import TurnContext
from agy_provider.store.config import load_config
from agy_provider.workers import off_loop

__all__ = [
    "ChatResult",
    "Spinner",
    "TerminalAsker",
    "TerminalDecisions",
    "TurnNarrator",
    "run_chat",
    "terminal_asker",
]

# Signals that end a chat the way Ctrl-C does. Without handlers SIGTERM and SIGHUP would kill
# this process at once and leave agy and its language server running to their own deadline.

# The logger keeps the chat command's name: `-v` prints it on every line it says.
log = logging.getLogger("agy_provider.cli.chat")

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Spinner:
    """`⠋ agy is starting…` on the terminal until the first output, then gone without a trace.

    `stop()` erases the line at once, synchronously, before anything else is written: clearing
    it on the spinner's next tick instead would wipe (or share a line with) the first text.
    """

    def __init__(self, err: TextIO) -> None:
        self._err = err
        self._task: asyncio.Task[None] | None = None
        self._shown = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._spin())

    async def _spin(self) -> None:
        for frame in itertools.cycle(_SPINNER):
            self._err.write(f"\r{frame} agy is starting…")
            self._err.flush()
            self._shown = True
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        """Stop and erase; safe to call again, and from the loop only."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._shown:
            self._shown = False
            self._err.write("\r\x1b[K")
            self._err.flush()

    async def finish(self) -> None:
        task = self._task
        self.stop()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class TerminalDecisions:
    """Asks the person at the terminal when agy waits on a permission or a question.

    Registered by `agy-provider chat` when a terminal can be asked; hooks run in a worker thread,
    so blocking on input is fine. `ask` and `say` are the terminal's input and output
    (`terminal_asker` makes them: the question on stderr or /dev/tty, never on stdout, which
    may be a file).
    """

    def __init__(self, ask: Callable[[str], str], say: Callable[[str], object]) -> None:
        self._ask = ask
        self._say = say

    @hookimpl(tryfirst=True)
    def decide_permission(
        self, request: PermissionRequest | None, step: Step, turn: TurnContext
    ) -> bool:
        what = f"{request.action} `{request.target}`" if request is not None else "an action"
        why = f" ({request.description})" if request is not None and request.description else ""
        answer = self._ask(f"agy wants to run {what}{why}. Allow? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    @hookimpl(tryfirst=True)
    def answer_question(
        self, questions: Sequence[Question], step: Step, turn: TurnContext
    ) -> list[dict[str, object]]:
        answers = []
        for question in questions:
            self._say(f"agy asks: {question.question}\n")
            ids = [option.id for option in question.options]
            for option in question.options:
                self._say(f"  {option.id}. {option.text}\n")
            reply = self._ask(
                "Your choice (numbers separated by commas, or your own words): "
            ).strip()
            picked = [part.strip() for part in reply.split(",") if part.strip() in ids]
            answer: dict[str, Any] = {"question": question.question, "selectedOptionIds": picked}
            if reply and not picked:
                answer["writeInResponse"] = reply
            answers.append(answer)
        return answers


class TerminalAsker:
    """The person at this terminal, for the questions of one turn, until `end()`.

    `say` shows text, `ask` shows a question and returns the line typed. The answer is read
    from the terminal's descriptor, one byte at a time and never past its line, in a wait that
    `end()` also wakes: once the turn is over nothing of it reads the terminal (the REPL's next
    line is the REPL's) or writes to it.

    A question still waiting then (or asked later) is never answered: its hook's thread waits,
    off the terminal, for good (the rpc source runs hooks in daemon threads for hooks that never
    return). agy's step counts as denied all the same: an abort's cancel refuses what agy waits
    on, and otherwise agy is gone or denied it itself. An answer now ("") would go to a turn that
    is over, to a server usually gone, and the source would report that failure on the terminal.
    """

    def __init__(self, reader: TextIO, writer: TextIO, before: Callable[[], object]) -> None:
        self._reader = reader  # kept, and so kept open, while its descriptor is read
        self._writer = writer
        self._before = before
        self._woken, self._wake = os.pipe()
        self._ended = False
        # Held while the terminal is used: `end()` waits for a line being read to be read.
        self._using = threading.Lock()

    def say(self, text: str) -> None:
        with self._using:
            if not self._ended:
                self._show(text)

    def ask(self, question: str) -> str:
        with self._using:
            line = None if self._ended else self._answer(question)
        if line is None:
            _wait_for_good()
        return line.decode(self._reader.encoding or "utf-8", "replace").rstrip("\n")

    def end(self) -> None:
        """The turn is over: a question still waiting stops reading the terminal, unanswered.

        Blocks (at most `_LET_GO_WAIT`) until a line already being read is read: call it off the
        event loop. Safe to call again.
        """
        if self._ended:
            return
        self._ended = True
        os.write(self._wake, b"\0")
        if self._using.acquire(timeout=_LET_GO_WAIT):
            # Nobody selects on the pipe any more (`_ended` is seen under the lock).
            os.close(self._woken)
            os.close(self._wake)
            self._using.release()

    def _show(self, text: str) -> None:
        self._before()
        self._writer.write(text)
        self._writer.flush()

    def _answer(self, question: str) -> bytes | None:
        """`question` shown, then one line from the terminal (None once `end()` woke the wait
        before the line began); EOFError when the terminal closed."""
        self._show(question)
        fd = self._reader.fileno()
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([fd, self._woken], [], [])
            # A line begun is finished (a terminal hands over whole lines): the bytes typed for
            # this question must not become the start of the REPL's next line.
            if fd not in ready or (self._woken in ready and not line):
                return None
            byte = os.read(fd, 1)
            if not byte:
                if not line:
                    raise EOFError("no answer: the terminal closed")
                break
            line += byte
        return line


# How long ending a turn's questions waits for a line the person already typed to be read.
_LET_GO_WAIT = 1.0


def _wait_for_good() -> NoReturn:
    """Where the thread of a question its turn no longer waits for stays (see `TerminalAsker`)."""
    threading.Event().wait()  # nobody holds it: never set
    raise AssertionError("an event nobody holds was set")


def terminal_asker(err: TextIO, before: Callable[[], object]) -> TerminalAsker | None:
    """The person at this terminal (`TerminalAsker`), or None when there is none to ask.

    Questions go to stderr when it is the terminal (else to /dev/tty) so they are seen even with
    stdout redirected; answers come from stdin when it is the terminal, else from /dev/tty (the
    prompt may have been piped in with `-`). `before` runs first (it clears the spinner and
    starts a fresh line).
    """
    # A terminal cannot be opened "r+" as text (a buffered random-access file must seek):
    # one handle for each direction. They live as long as the process (one chat).
    try:
        reader: TextIO = sys.stdin if sys.stdin.isatty() else open("/dev/tty", encoding="utf-8")  # noqa: SIM115
        writer: TextIO = err if err.isatty() else open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115
    except OSError:
        return None
    return TerminalAsker(reader, writer, before)


class TurnNarrator:
    """`--verbose`: says on stderr (logger `agy_provider.cli.chat`, info) what the turn does — agy
    started, the conversation it bound, the event source and server, how it ended. Never the
    prompt's text or a token."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def _once(self, key: str, message: str, *args: object) -> None:
        if key not in self._said:
            self._said.add(key)
            log.info(message, *args)

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: TurnContext) -> None:
        process = turn.process
        if process is not None:
            binary = process.request.agy_bin
            self._once("agy", "agy started: %s (pid %s) in %s", binary, process.pid, turn.cwd)
        binding = turn.binding
        if binding is not None:
            self._once("bound", "conversation %s (%s)", binding.conversation_id, binding.path)
        if turn.endpoint:
            self._once("server", "agy's language server at %s", turn.endpoint)
        if event.type in ("done", "error"):
            message = event.message if event.type == "done" else event.error
            log.info("turn ended: %s (%d tokens)", message.stop_reason, message.usage.total_tokens)


@dataclasses.dataclass(frozen=True, slots=True)
class ChatResult:
    """How a chat turn ended: its final message (None only when a second signal cut the wait
    short) and the signal that interrupted it, if any."""

    message: AssistantMessage | None
    signal: int | None = None


def _stopping_notice(err: TextIO) -> Callable[[str], None]:
    """What chat says when a signal stops agy, on a line of its own: on a terminal the signal's
    echo (^C) or the spinner may share the current one."""

    def say(name: str) -> None:
        if err.isatty():
            err.write("\n")
        err.write(f"agy-provider: {name} received: stopping agy…\n")
        err.flush()

    return say


class _Output:
    """`out`, remembering whether its last write ended a line (so stderr lines start cleanly)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            # A dimmed line ends in the colour reset after its newline: still a line's start.
            self.at_line_start = text.removesuffix("\x1b[0m").endswith("\n")


class _ChatScreen:
    """Where a chat turn is shown: text for people (a spinner until the first output, errors on
    stderr), or pi events for machines on `out`, flushed as they come. Made on the loop."""

    def __init__(self, out: TextIO, err: TextIO, *, events: bool) -> None:
        no_colour = bool(os.environ.get("NO_COLOR"))
        self._out = out
        self._err = err
        self._events = events
        self._text_out = _Output(out)
        self._printer = LivePrinter(self._text_out.write, colour=out.isatty() and not no_colour)
        self._error_printer = LivePrinter(err.write, colour=err.isatty() and not no_colour)
        self.spinner = Spinner(err) if not events and err.isatty() else None
        self._loop = asyncio.get_running_loop()

    def show(self, event: AssistantMessageEvent) -> None:
        if event.type != "start" and self.spinner is not None:
            self.spinner.stop()  # before the first write: no residue, nothing wiped
        if self._events:
            self._out.write(event_line(event) + "\n")
            _say_error(event, self._err)
        elif isinstance(event, ErrorEvent):
            if not self._text_out.at_line_start:
                self._text_out.write("\n")
            self._error_printer.feed(event)
        else:
            self._printer.feed(event)
        self._out.flush()

    def clear_line(self) -> None:
        """Before a question: the spinner gone, the question on a line of its own."""
        spinner = self.spinner
        if spinner is not None:
            # Hooks ask from a worker thread: stop the spinner on the loop and wait for it, or
            # its next frame could land on the question's line.
            async def stop() -> None:
                spinner.stop()

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(2.0)
        if not self._text_out.at_line_start and self._out.isatty():
            self._text_out.write("\n")
            self._out.flush()


async def run_chat(
    prompt: str,
    *,
    model: str = "",
    thinking: str | None = None,
    backend: str | None = None,
    session: str = "",
    continue_last: bool = False,
    system: str = "",
    cwd: str | None = None,
    agy_bin: str | None = None,
    events: bool = False,
    verbose: bool = False,
    abort: AbortSignal | None = None,
    epilogue: bool = True,
    out: TextIO,
    err: TextIO,
) -> ChatResult:
    """Run `prompt` as one turn and write it to `out` as it streams.

    With `session`, the turn continues that session's agy conversation (sending only `prompt`).
    Without one, the turn is remembered as this folder's last chat, which `continue_last`
    continues. `system` is sent before the prompt of a new conversation. Errors go to `err`
    with what to do (in `events` mode the `error` event is also on `out`). Colour only on a
    terminal and never with NO_COLOR. Raises `UsageError` for bad settings before anything
    starts. `abort` is the caller's own signal (the REPL aborts with it from its main thread);
    `epilogue=False` returns after the final event without waiting for the turn's epilogue,
    for a caller whose loop goes on running (the REPL's), where that work simply finishes.
    """
    config = load_config()
    chosen = model or config.model or "agy"
    pi_model = agy_model(chosen)
    abort = abort or AbortSignal()
    # Every plain chat is remembered as this folder's last one; -c continues it.
    folder_session = _folder_session(cwd)
    options = SimpleStreamOptions(
        session_id=session or folder_session,
        reasoning=thinking or (config.thinking or None),  # type: ignore[arg-type]
        signal=abort,
    )
    screen = _ChatScreen(out, err, events=events)
    spinner = screen.spinner
    asker = None
    terminal = None
    narrator = None
    # Signals are ours from here on: loading the plugins can take a moment, and a signal then
    # must abort the turn too rather than kill this process with agy about to start.
    with abort_on_signals(abort, on_first=_stopping_notice(err)) as received:
        pm = get_plugin_manager()
        try:
            if verbose:
                narrator = TurnNarrator()
                pm.register(narrator, name="agy-provider-chat-narrator")
            terminal = None if events else terminal_asker(err, screen.clear_line)
            if terminal is not None:
                asker = TerminalDecisions(terminal.ask, terminal.say)
                pm.register(asker, name="agy-provider-chat-terminal")
            if spinner is not None:
                spinner.start()
            stream = stream_simple(
                pi_model,
                Context(
                    system_prompt=system or None,
                    messages=[UserMessage(content=prompt, timestamp=0)],
                ),
                options,
                cwd=cwd,
                agy_bin=agy_bin,
                event_source=backend,
                # The command line has no history of its own: a named session (or -c) always
                # continues its conversation; a plain chat (history never matches) starts anew.
                continue_session=bool(session) or continue_last,
            )
            async for event in stream:
                screen.show(event)
            message = dataclasses.replace(await stream.result())
            await _end_questions(terminal)  # the turn is over, its epilogue is not: no more asking
            if spinner is not None:
                await spinner.finish()
            if epilogue:
                await _let_the_turn_finish()
        except asyncio.CancelledError:
            if not received:
                raise
            # A second signal: stop waiting. The provider's task is cancelled as the loop closes,
            # and ends agy's process tree on its way out.
            err.write("agy-provider: stopped without waiting for the turn to finish\n")
            return ChatResult(None, received[0])
        finally:
            if asker is not None:
                pm.unregister(asker)
            if narrator is not None:
                pm.unregister(narrator)
            await _end_questions(terminal)
            if spinner is not None:
                await spinner.finish()
    return ChatResult(message, received[0] if received else None)


# How long the CLI waits, after the final event, for the turn's own epilogue (agy's tree ended,
# the session saved) before the loop closes and cancels what is left.
_EPILOGUE_WAIT = 15.0


async def _end_questions(terminal: TerminalAsker | None) -> None:
    """The turn is over: a question still waiting stops reading the terminal, unanswered, and
    the terminal is the person's again (the REPL reads the next line)."""
    if terminal is not None:
        await off_loop(terminal.end)


def _folder_session(cwd: str | None) -> str:
    """The session id of the last plain chat started in `cwd` (what -c continues)."""
    folder = os.path.realpath(cwd or os.getcwd())
    return "cli:" + hashlib.sha256(folder.encode("utf-8", "surrogateescape")).hexdigest()[:32]


async def _let_the_turn_finish() -> None:
    """Wait for the provider's work after the final event: closing the loop would cancel it."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=_EPILOGUE_WAIT)


def _say_error(event: AssistantMessageEvent, err: TextIO) -> None:
    """In events mode the error event goes to stdout for machines; people read it on stderr."""
    if isinstance(event, ErrorEvent):
        err.write(f"agy-provider: {event.error.error_message or 'the turn failed'}\n")
        err.flush()
