"""Benchmark: conversations without a session id (issue 16's goals), against agy-sim.

- A stateless host (whole transcript each turn, no session id) for 10 turns: how many agy
  conversations, and the prompt agy receives on turns 2 and 10 — beside the baseline, what the
  same turn sent before this issue (a new conversation with the whole history as a preamble).
- CPU of the provider for a resumed stateless turn vs a resumed turn with a session id, in the
  same run, rounds alternating: `time.process_time()` of this process (agy-sim's CPU is not in
  it) from the call until the records are written (`wait_for_turns`). Goal: no more CPU.
- 20 concurrent stateless hosts with identical prompts, two turns each: misbinds (a host whose
  second turn ran on another host's conversation). Goal: zero.

Run: `.venv/bin/python benchmarks/bench_continuity.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for live_support

import live_support as live

from agy_provider.hookspecs import hookimpl
from agy_provider.live.continuity import parse_mark
from agy_provider.live.prompt import build_prompt
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import get_plugin_manager

CPU_GOAL = 1.0  # a stateless resume costs no more than a resume by session id


class Prompts:
    """What agy was given, per turn (the `observe_event` hook sees the turn's context)."""

    def __init__(self) -> None:
        self.by_turn: dict[int, tuple[str, str]] = {}

    @hookimpl
    def observe_event(self, event: Any, turn: Any) -> None:
        if event.type in ("done", "error") and turn.binding is not None:
            self.by_turn[id(turn)] = (turn.prompt, turn.binding.conversation_id)


async def one_turn(messages: list[Message], session: str | None = None) -> AssistantMessage:
    stream = stream_simple(
        live.model(), Context(messages=messages), SimpleStreamOptions(session_id=session)
    )
    async for _event in stream:
        pass
    return await stream.result()


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=0)


async def growth(prompts: Prompts) -> None:
    transcript: list[Message] = []
    sent: list[tuple[str, str]] = []
    baseline: list[int] = []
    for n in range(10):
        transcript.append(user(f"step {n}: please continue the task with the next change"))
        baseline.append(len(build_prompt(Context(messages=list(transcript)), resume=False)))
        prompts.by_turn.clear()
        reply = await one_turn(list(transcript))
        await wait_for_turns()
        transcript.append(reply)
        sent.extend(prompts.by_turn.values())
    ids = {cid for _p, cid in sent}
    print(f"  10 stateless turns: {len(ids)} agy conversation(s) (goal 1; before: 10)")
    print(
        f"  prompt agy received: turn 2 {len(sent[1][0])} chars, turn 10 {len(sent[9][0])} chars "
        f"(before: {baseline[1]} and {baseline[9]}, the history as a preamble)"
    )
    ok = len(ids) == 1 and len(sent[9][0]) == len(sent[1][0])
    print(f"  → {'PASS' if ok else 'FAIL'}: one conversation, a prompt that does not grow")


async def cpu(rounds: int) -> None:
    # Two conversations of the same length, one continued by mark, one by session id.
    stateless: list[Message] = [user("first")]
    stateless.append(await one_turn(list(stateless)))
    pinned: list[Message] = [user("first")]
    pinned.append(await one_turn(list(pinned), session="bench-session"))
    await wait_for_turns()
    costs: dict[str, list[float]] = {"mark": [], "session": []}
    for r in range(rounds):
        order = ("mark", "session") if r % 2 == 0 else ("session", "mark")
        for how in order:
            transcript = stateless if how == "mark" else pinned
            transcript.append(user(f"round {r}"))
            cpu0 = time.process_time()
            reply = await one_turn(list(transcript), None if how == "mark" else "bench-session")
            await wait_for_turns()
            costs[how].append(time.process_time() - cpu0)
            transcript.append(reply)
    mark, session = live.median(costs["mark"]), live.median(costs["session"])
    ratio = mark / session
    print(
        f"  provider CPU per resumed turn (median of {rounds}): by mark {mark * 1000:.1f} ms, "
        f"by session id {session * 1000:.1f} ms → {ratio:.2f}× "
        f"({'PASS' if ratio <= CPU_GOAL + 0.05 else 'FAIL'}: goal ≤ {CPU_GOAL}×, 5% noise band)"
    )


async def concurrent(prompts: Prompts) -> None:
    hosts: list[list[Message]] = [[user("identical prompt")] for _ in range(20)]
    first = await asyncio.gather(*(one_turn(list(h)) for h in hosts))
    await wait_for_turns()
    for transcript, reply in zip(hosts, first, strict=True):
        transcript.extend([reply, user("identical follow-up")])
    second = await asyncio.gather(*(one_turn(list(h)) for h in hosts))
    await wait_for_turns()
    misbinds = failed = 0
    for first_reply, reply in zip(first, second, strict=True):
        before, after = parse_mark(first_reply.response_id), parse_mark(reply.response_id)
        if reply.stop_reason != "stop" or before is None or after is None:
            failed += 1
        elif before[0] != after[0]:
            misbinds += 1
    distinct = {m[0] for r in second if (m := parse_mark(r.response_id)) is not None}
    print(
        f"  20 concurrent stateless hosts × 2 turns: {misbinds} misbind(s), {failed} failed, "
        f"{len(distinct)} conversations → {'PASS' if misbinds == 0 and failed == 0 else 'FAIL'}"
    )


async def run(rounds: int) -> None:
    prompts = Prompts()
    pm = get_plugin_manager()
    pm.register(prompts, name="bench-prompts")
    try:
        await one_turn([user("warm up")])  # imports and agy's version, before anything counts
        await wait_for_turns()
        await growth(prompts)
        await cpu(rounds)
        await concurrent(prompts)
    finally:
        pm.unregister(name="bench-prompts")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8, help="CPU rounds (each way once)")
    args = parser.parse_args()
    live.run_header("bench_continuity: conversations without a session id")
    with live.private_world("agy-bench-continuity-"):
        asyncio.run(run(args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
