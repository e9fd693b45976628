"""One interactive turn for the command line: run it through `stream_simple` and print it live.

People get text (thinking dimmed, a spinner while agy warms up); machines get pi events, flushed.
SIGINT, SIGTERM and SIGHUP abort the turn (agy's whole tree is ended) and the turn still ends with
its `aborted` error event; a second signal stops waiting for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import signal as signals
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from agy_provider.config import load_config
from agy_provider.events import AssistantMessageEvent, ErrorEvent
from agy_provider.formatters import LivePrinter, event_line
from agy_provider.hookspecs import hookimpl
from agy_provider.options import AbortSignal, SimpleStreamOptions
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.provider import stream_simple
from agy_provider.types import AssistantMessage, Context, Model, UserMessage

__all__ = ["ABORT_SIGNALS", "ChatResult", "TerminalDecisions", "run_chat"]

# Signals that end a chat the way Ctrl-C does. Without handlers SIGTERM and SIGHUP would kill
# this process at once and leave agy and its language server running to their own deadline.
ABORT_SIGNALS: tuple[signals.Signals, ...] = (signals.SIGINT, signals.SIGTERM, signals.SIGHUP)

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


async def _spin(err: TextIO, started: asyncio.Event) -> None:
    for frame in itertools.cycle(_SPINNER):
        if started.is_set():
            break
        err.write(f"\r{frame} agy is starting…")
        err.flush()
        await asyncio.sleep(0.1)
    err.write("\r\x1b[K")
    err.flush()


class TerminalDecisions:
    """Asks the person at the terminal when agy waits on a permission or a question.

    Registered by `agy-provider chat` when stdin is a terminal; hooks run in a worker thread, so
    blocking on input is fine. `ask` and `say` are the terminal's input and output.
    """

    def __init__(self, ask: Callable[[str], str], say: Callable[[str], object]) -> None:
        self._ask = ask
        self._say = say

    @hookimpl(tryfirst=True)
    def decide_permission(self, request: Any, step: Any, turn: Any) -> bool:
        what = f"{request.action} `{request.target}`" if request is not None else "an action"
        why = f" ({request.description})" if request is not None and request.description else ""
        answer = self._ask(f"agy wants to run {what}{why}. Allow? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    @hookimpl(tryfirst=True)
    def answer_question(
        self, questions: Sequence[Any], step: Any, turn: Any
    ) -> list[dict[str, Any]]:
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


@dataclasses.dataclass(frozen=True, slots=True)
class ChatResult:
    """How a chat turn ended: its final message (None only when a second signal cut the wait
    short) and the signal that interrupted it, if any."""

    message: AssistantMessage | None
    signal: int | None = None


@contextlib.contextmanager
def _abort_on_signals(abort: AbortSignal, err: TextIO) -> Iterator[list[int]]:
    """Turn SIGINT/SIGTERM/SIGHUP into `abort`; yields the signals received, in order.

    The first signal aborts the turn, which ends agy's tree and then the stream; a second one
    cancels the waiting task (the provider still ends agy's tree as its task is cancelled).
    """
    loop = asyncio.get_running_loop()
    waiting = asyncio.current_task()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        name = signals.Signals(signum).name
        if len(received) == 1:
            # On a terminal the signal's echo (^C) or the spinner may share the line: start anew.
            if err.isatty():
                err.write("\n")
            err.write(f"agy-provider: {name} received: stopping agy…\n")
            err.flush()
            abort.abort(f"interrupted by {name}")
        elif waiting is not None:
            waiting.cancel()

    installed = []
    for signum in ABORT_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
            continue
        installed.append(signum)
    try:
        yield received
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


class _Output:
    """`out`, remembering whether its last write ended a line (so stderr lines start cleanly)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.at_line_start = text.endswith("\n")


async def run_chat(
    prompt: str,
    *,
    model: str = "",
    thinking: str | None = None,
    backend: str | None = None,
    session: str = "",
    cwd: str | None = None,
    agy_bin: str | None = None,
    events: bool = False,
    out: TextIO,
    err: TextIO,
) -> ChatResult:
    """Run `prompt` as one turn and write it to `out` as it streams.

    With `session`, the turn continues that session's agy conversation (sending only `prompt`).
    Errors go to `err` with what to do (in `events` mode the `error` event is also on `out`).
    Raises `UsageError` for bad settings before anything starts.
    """
    config = load_config()
    chosen = model or config.model or "agy"
    pi_model = Model(
        id=chosen,
        name=chosen,
        api="agy",
        provider="agy",
        base_url="",
        reasoning=True,
        context_window=1_000_000,
        max_tokens=65_536,
    )
    abort = AbortSignal()
    options = SimpleStreamOptions(
        session_id=session or None,
        reasoning=thinking or (config.thinking or None),  # type: ignore[arg-type]
        signal=abort,
    )
    text_out = _Output(out)
    printer = LivePrinter(text_out.write, colour=out.isatty())
    error_printer = LivePrinter(err.write, colour=err.isatty())
    started = asyncio.Event()
    spinner: asyncio.Task[None] | None = None
    asker = None
    # Signals are ours from here on: loading the plugins can take a moment, and a signal then
    # must abort the turn too rather than kill this process with agy about to start.
    with _abort_on_signals(abort, err) as received:
        pm = get_plugin_manager()
        try:
            if not events and sys.stdin.isatty():
                asker = TerminalDecisions(input, err.write)
                pm.register(asker, name="agy-provider-chat-terminal")
            if not events and err.isatty():
                spinner = asyncio.create_task(_spin(err, started))
            stream = stream_simple(
                pi_model,
                Context(messages=[UserMessage(content=prompt, timestamp=0)]),
                options,
                cwd=cwd,
                agy_bin=agy_bin,
                event_source=backend,
                # The command line has no history of its own: a named session always continues
                # its conversation rather than comparing histories.
                continue_session=bool(session),
            )
            async for event in stream:
                if event.type != "start":
                    started.set()
                if events:
                    out.write(event_line(event) + "\n")
                    _say_error(event, err)
                elif isinstance(event, ErrorEvent):
                    if not text_out.at_line_start:
                        text_out.write("\n")
                    error_printer.feed(event)
                else:
                    printer.feed(event)
                out.flush()
            message = dataclasses.replace(await stream.result())
            await _let_the_turn_finish(spinner)
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
            started.set()
            if spinner is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await spinner
    return ChatResult(message, received[0] if received else None)


# How long the CLI waits, after the final event, for the turn's own epilogue (agy's tree ended,
# the session saved) before the loop closes and cancels what is left.
_EPILOGUE_WAIT = 15.0


async def _let_the_turn_finish(*also_running: asyncio.Task[None] | None) -> None:
    """Wait for the provider's work after the final event: closing the loop would cancel it."""
    others = asyncio.all_tasks() - {asyncio.current_task(), *also_running}
    if others:
        await asyncio.wait(others, timeout=_EPILOGUE_WAIT)


def _say_error(event: AssistantMessageEvent, err: TextIO) -> None:
    """In events mode the error event goes to stdout for machines; people read it on stderr."""
    if isinstance(event, ErrorEvent):
        err.write(f"agy-provider: {event.error.error_message or 'the turn failed'}\n")
        err.flush()
