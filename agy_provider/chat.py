"""One interactive turn for the command line: run it through `stream_simple` and print it live.

People get text (thinking dimmed, a spinner while agy warms up); machines get pi events, flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from agy_provider.config import load_config
from agy_provider.formatters import LivePrinter, event_line
from agy_provider.hookspecs import hookimpl
from agy_provider.options import AbortSignal, SimpleStreamOptions
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.provider import stream_simple
from agy_provider.types import AssistantMessage, Context, Model, UserMessage

__all__ = ["TerminalDecisions", "run_chat"]

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
) -> AssistantMessage:
    """Run `prompt` as one turn and write it to `out` as it streams; returns the final message."""
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
    signal = AbortSignal()
    options = SimpleStreamOptions(
        session_id=session or None,
        reasoning=thinking or (config.thinking or None),  # type: ignore[arg-type]
        signal=signal,
    )
    stream = stream_simple(
        pi_model,
        Context(messages=[UserMessage(content=prompt, timestamp=0)]),
        options,
        cwd=cwd,
        agy_bin=agy_bin,
        event_source=backend,
    )
    printer = LivePrinter(out.write, colour=out.isatty())
    pm = get_plugin_manager()
    asker = None
    if not events and sys.stdin.isatty():
        asker = TerminalDecisions(input, err.write)
        pm.register(asker, name="agy-provider-chat-terminal")
    started = asyncio.Event()
    spinner = asyncio.create_task(_spin(err, started)) if not events and err.isatty() else None
    try:
        async for event in stream:
            if event.type != "start":
                started.set()
            if events:
                out.write(event_line(event) + "\n")
            else:
                printer.feed(event)
            out.flush()
    except (KeyboardInterrupt, asyncio.CancelledError):
        signal.abort("interrupted")
        raise
    finally:
        if asker is not None:
            pm.unregister(asker)
        started.set()
        if spinner is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await spinner
    return dataclasses.replace(await stream.result())
