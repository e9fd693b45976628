"""`agy-provider ask`: one AskAntigravity turn from the command line.

Prints the answer (or the result as JSON) and the turn's progress, and maps signals to exit codes.
"""

from __future__ import annotations

import json
from typing import TextIO

from agy_provider.hosts.abort_signals import abort_on_signals
from agy_provider.hosts.ask import Mode
from agy_provider.hosts.ask import Thinking
from agy_provider.hosts.ask import ask_antigravity
from agy_provider.pi.options import AbortSignal

__all__ = ["ask_command"]


async def ask_command(
    prompt: str,
    *,
    cwd: str | None,
    model: str,
    thinking: Thinking | None,
    mode: Mode | None,
    conversation: str | None,
    timeout: float | None,
    agy_bin: str | None,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """`agy-provider ask`: the answer on `out` (or the result as JSON), progress on `err`.

    Returns the exit code: 0 answered, 1 the turn failed (agy's error on `err`), 128+N when
    signal N (SIGINT, SIGTERM, SIGHUP) aborted it — agy's whole tree is ended first.
    """
    abort = AbortSignal()

    def show(elapsed: float, step: str) -> None:
        err.write(f"[{elapsed:6.1f}s] {step}\n")
        err.flush()

    with abort_on_signals(abort, second_cancels=False) as received:
        result = await ask_antigravity(
            prompt,
            cwd=cwd,
            model=model,
            thinking=thinking,
            mode=mode,
            conversation=conversation,
            timeout=timeout,
            on_progress=show,
            signal=abort,
            agy_bin=agy_bin,
        )
    if as_json:
        out.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
    elif result.answer:
        out.write(result.answer if result.answer.endswith("\n") else result.answer + "\n")
    out.flush()
    if result.conversation_id:
        who = f"{result.model or 'agy'} answered in" if result.ok else "the turn ran in"
        err.write(
            f"agy-provider: {who} conversation {result.conversation_id} "
            f"(continue it with --conversation {result.conversation_id})\n"
        )
    if received:
        return 128 + received[0]
    if not result.ok:
        err.write(f"agy-provider: {result.error or 'the turn failed'}\n")
        return 1
    return 0
