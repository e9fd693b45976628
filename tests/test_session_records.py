"""Report-only (engine review): reproductions of bugs NOT fixed. Each test fails today.

Run from the repo root:  .venv/bin/python -m pytest -q -p no:cacheprovider <copy of this file in tests/>
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from test_turn_driver import (
    CONVERSATION,
    HANG,
    Script,
    collect,
    edges_for,
    start_turn,
    until,
)

from agy_provider.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agy_provider.options import AbortSignal
from agy_provider.plugin_manager import event_sources
from agy_provider.provider import wait_for_turns
from agy_provider.sessions import SessionRecord
from agy_provider.sim import descriptors as pb
from agy_provider.sim.bulk import STEPS_PER_TURN, planner_step, write_conversation
from agy_provider.turn import history_digest
from agy_provider.types import UserMessage

# -- sessions: a row an aborted agy left GENERATING must not pin every later record -----------


def _user_step(text: str) -> Any:
    step = pb.Step()
    step.type = pb.STEP_TYPE["CORTEX_STEP_TYPE_USER_INPUT"]
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.user_input.user_response = text
    step.user_input.items.add().text = text
    return step


async def test_a_row_left_generating_by_an_abort_does_not_pin_later_records(
    tmp_path: Path,
) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    # The real database reader, on a database written the way agy writes it.
    edges.sources = lambda: {"sqlite": event_sources()["sqlite"]}
    folder = tmp_path / "agy" / "conversations"
    folder.mkdir(parents=True)
    writer = write_conversation(folder / f"{CONVERSATION}.db", CONVERSATION, turns=1)
    earlier: list[Any] = [UserMessage(content="request 0", timestamp=0)]
    edges.store.put(
        "s",
        SessionRecord(
            CONVERSATION,
            last_step_index=STEPS_PER_TURN - 1,
            history_digest=history_digest(earlier),
        ),
    )
    try:
        # Turn two is aborted while agy generates; agy dies with its row still GENERATING.
        signal = AbortSignal()
        second = start_turn(edges, session="s", prompt="two", history=earlier, signal=signal)
        await until(lambda: script.processes)
        writer.append(_user_step("two"))
        writer.append(planner_step("partial", status="CORTEX_STEP_STATUS_GENERATING"))
        seen: list[AssistantMessageEvent] = []

        async def until_partial() -> None:
            async for event in second:
                seen.append(event)
                if event.type == "text_delta":
                    return

        await asyncio.wait_for(until_partial(), HANG)
        signal.abort()
        seen.extend(await collect(second))
        assert isinstance(seen[-1], ErrorEvent) and seen[-1].reason == "aborted"
        await wait_for_turns()
        # Turn three resumes (the host kept the question, dropped the aborted answer).
        history = [*earlier, UserMessage(content="two", timestamp=0)]
        third = start_turn(edges, session="s", prompt="three", history=history)
        await until(lambda: len(script.processes) == 2)
        assert script.processes[1].request.conversation_id == CONVERSATION
        writer.append(_user_step("three"))
        last = writer.append(planner_step("Three."))
        await asyncio.sleep(0.05)
        script.processes[1].exit(0)
        assert isinstance((await collect(third))[-1], DoneEvent)
        await wait_for_turns()
        record = edges.store.get("s")
        # Once pinned at the stale row's index - 1 for this and every later turn, so each resume
        # re-read (and re-decoded) every row since the abort.
        assert record is not None and record.last_step_index == last
    finally:
        writer.close()
