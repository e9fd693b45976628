"""What a turn leaves in its session record, against the fakes of its edges and (for an aborted
row) a real database: a late save never overwrites a newer record, a turn that never reached agy's
conversation leaves the session resumable, and a row an abort left GENERATING holds nothing back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fakes import CONVERSATION
from fakes import HANG
from fakes import Script
from fakes import collect
from fakes import edges_for
from fakes import planner
from fakes import start_turn
from fakes import until
from fakes import user

from agy_provider.live.provider import wait_for_turns
from agy_provider.live.turn import history_digest
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import event_sources
from agy_provider.sim import descriptors as pb
from agy_provider.sim.bulk import STEPS_PER_TURN
from agy_provider.sim.bulk import planner_step
from agy_provider.sim.bulk import write_conversation
from agy_provider.store.sessions import SessionRecord

# -- sessions: a late save of an earlier turn never overwrites a newer turn's record ----------


async def test_an_earlier_turns_late_version_save_keeps_the_newer_record(tmp_path: Path) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    asked = 0
    version_known = asyncio.Event()

    async def version(binary: str) -> str:  # a first run: agy's version takes a while to learn
        nonlocal asked
        asked += 1
        if asked == 1:
            await version_known.wait()
        return "1.2.13"

    edges.version = version
    first = start_turn(edges, session="s", prompt="one")
    await until(lambda: script.sources)
    script.sources[0].enqueue([user(0, "one"), planner(1, "One.")])
    await until(lambda: not script.sources[0].queue)
    script.processes[0].exit(0)
    done = (await collect(first))[-1]
    assert isinstance(done, DoneEvent)
    # The host goes on at once; the first turn is still waiting for agy's version.
    history: list[Any] = [UserMessage(content="one", timestamp=0), done.message]
    second = start_turn(edges, session="s", prompt="two", history=history)
    await until(lambda: len(script.sources) == 2)
    assert script.processes[1].request.conversation_id == CONVERSATION  # it resumed
    script.sources[1].enqueue([user(2, "two"), planner(3, "Two.")])
    await until(lambda: not script.sources[1].queue)
    script.processes[1].exit(0)
    done_two = (await collect(second))[-1]
    assert isinstance(done_two, DoneEvent)
    await until(lambda: (edges.store.get("s") or SessionRecord("")).last_step_index == 3)
    version_known.set()  # now the first turn saves its record again, with the version
    await wait_for_turns()
    record = edges.store.get("s")
    assert record is not None and record.last_step_index == 3  # was 1: turn two forgotten
    newest = [*history, UserMessage(content="two", timestamp=0), done_two.message]
    assert record.history_digest == history_digest(newest)


# -- sessions: a turn that never reached agy's conversation leaves the session as it was ------


async def test_a_turn_agy_refused_before_its_user_step_keeps_the_session_resumable(
    tmp_path: Path,
) -> None:
    script = Script(stderr="Error: quota exhausted")
    edges = edges_for(script, tmp_path)
    earlier: list[Any] = [UserMessage(content="one", timestamp=0)]
    edges.store.put(
        "s", SessionRecord(CONVERSATION, last_step_index=1, history_digest=history_digest(earlier))
    )
    first = start_turn(edges, session="s", prompt="two", history=earlier)
    await until(lambda: script.sources)
    script.processes[0].exit(1)  # agy refused the turn: no step of it was ever written
    assert isinstance((await collect(first))[-1], ErrorEvent)
    await wait_for_turns()
    # The host retries the same question: it must still resume the conversation (before, the
    # record claimed "two" was in it, the digest no longer matched, and a new one started).
    retry = start_turn(edges, session="s", prompt="two", history=earlier)
    await until(lambda: len(script.processes) == 2)
    assert script.processes[1].request.conversation_id == CONVERSATION
    assert script.processes[1].request.prompt == "two"
    script.processes[1].exit(0)
    await collect(retry)
    await wait_for_turns()


# -- sessions: a turn after an abort that left a row GENERATING is recorded, and not held back --


def _user_step(text: str) -> Any:
    step = pb.Step()
    step.type = pb.STEP_TYPE["CORTEX_STEP_TYPE_USER_INPUT"]
    step.status = pb.STEP_STATUS["CORTEX_STEP_STATUS_DONE"]
    step.user_input.user_response = text
    step.user_input.items.add().text = text
    return step


async def test_a_turn_after_an_abort_that_left_a_row_generating_is_recorded(
    tmp_path: Path,
) -> None:
    script = Script()
    edges = edges_for(script, tmp_path)
    # The real database reader, on a database written the way agy writes it.
    edges.sources = lambda: {"sqlite": event_sources()["sqlite"]}
    folder = tmp_path / "agy" / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CONVERSATION}.db").unlink(missing_ok=True)
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
        script.processes[1].exit(0)
        done = (await collect(third))[-1]
        assert isinstance(done, DoneEvent)
        await wait_for_turns()
        record = edges.store.get("s")
        # The record says the conversation now holds turn three (else the host's next turn
        # starts a new conversation), and the dead turn's GENERATING row no longer holds
        # last_step_index back (once it did, and every resume re-read the rows since the abort).
        assert record is not None and record.conversation_id == CONVERSATION
        assert record.history_digest == history_digest(
            [*history, UserMessage(content="three", timestamp=0), done.message]
        )
        assert record.last_step_index == last
    finally:
        writer.close()
