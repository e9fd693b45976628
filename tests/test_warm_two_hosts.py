"""A warm agy never writes a conversation it has not seen in full (issue 29, item 2): two
long-lived hosts (two processes, each with its warm pool) taking turns on one conversation, and
the decision each makes before reusing its idle agy (`pool.moved_on`, `WarmPool.stale`).

agy keeps its conversation in memory: an idle agy that missed another host's turn would write
its next steps over indices that turn already wrote (`UNIQUE constraint failed: steps.idx`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from live_helpers import scenario_answer

from agy_provider.agy.argv import TurnRequest
from agy_provider.live.warm.pool import POOL
from agy_provider.live.warm.pool import WarmAgy
from agy_provider.live.warm.pool import moved_on
from agy_provider.live.warm.pool import newest_index
from agy_provider.sim.writer import ConversationWriter

CONVERSATION = "0d6c2f4e-6b1a-4c55-9f1e-2a7b3c4d5e6f"


# --- the decision --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "newest", "stale"),
    [
        (7, 7, False),  # nothing written since its last turn: it saw all of it
        (-1, -1, False),  # no database yet, and none then either
        (7, 9, True),  # another agy wrote two steps since
        (7, 5, True),  # the database was replaced by a shorter one
        (None, 7, True),  # its last turn's end was not read: no proof
        (7, None, True),  # the database cannot be read now: no proof
    ],
)
def test_an_idle_agy_is_reused_only_when_its_conversation_ends_where_it_left_it(
    seen: int | None, newest: int | None, stale: bool
) -> None:
    assert moved_on(seen, newest) is stale


def idle_agy(state: Path, *, turns: int = 1) -> WarmAgy:
    """An agy of `CONVERSATION` as the pool keeps it between turns (not started: the decision
    reads only the database and what the agy remembers)."""
    request = TurnRequest(
        prompt="",
        cwd=str(state),
        agy_bin="agy-sim",
        conversation_id=CONVERSATION,
        env={"ANTIGRAVITY_APP_DATA_DIR": str(state)},
    )
    agy = WarmAgy("key", request)
    agy.turns = turns
    return agy


def test_the_pool_reads_the_conversation_database_to_decide(tmp_path: Path) -> None:
    agy = idle_agy(tmp_path)
    assert newest_index(agy) == -1  # no database: nothing written yet
    writer = ConversationWriter(tmp_path / "conversations" / f"{CONVERSATION}.db", CONVERSATION)
    try:
        for index in range(3):
            writer.write_raw(index, 14, 3, b"")
        agy.seen_index = newest_index(agy)
        assert agy.seen_index == 2
        assert not POOL.stale(agy)
        writer.write_raw(2, 15, 3, b"")  # a row rewritten in place: still agy's own last step
        assert not POOL.stale(agy)
        writer.write_raw(3, 14, 3, b"")  # another host's turn began
        assert POOL.stale(agy)
        # A spare, or an agy started for this turn, has no earlier turn to have missed.
        assert not POOL.stale(idle_agy(tmp_path, turns=0))
    finally:
        writer.close()


# --- two hosts, end to end ---------------------------------------------------------------------

# One long-lived host: each stdin line is the prompt of one turn of session "shared" (continued
# whatever the history), run on the process's one loop, so its warm pool keeps its agy between
# turns; each turn's outcome is one JSON line: its final event, answer, agy's pid and `result`.
HOST = textwrap.dedent(
    """
    import asyncio, json, sys
    from agy_provider.hookspecs import hookimpl
    from agy_provider.live.provider import stream_simple, wait_for_turns
    from agy_provider.pi.options import SimpleStreamOptions
    from agy_provider.pi.types import Context, Model, TextContent, UserMessage
    from agy_provider.plugin_manager import get_plugin_manager

    MODEL = Model(id="gemini-3.7-flash", name="Gemini 3.7 Flash", api="agy", provider="agy",
                  base_url="", reasoning=True, context_window=1_000_000, max_tokens=65_536)

    class Seen:
        result = None
        pid = 0

        @hookimpl
        def observe_event(self, event, turn):
            if event.type in ("done", "error"):
                Seen.result, Seen.pid = turn.process.result, turn.process.pid

    get_plugin_manager().register(Seen(), name="two-hosts-seen")

    async def main():
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            context = Context(messages=[UserMessage(content=line.strip(), timestamp=0)])
            stream = stream_simple(
                MODEL, context, SimpleStreamOptions(session_id="shared"), continue_session=True
            )
            events = [event async for event in stream]
            message = await stream.result()
            await wait_for_turns()
            text = "".join(b.text for b in message.content if isinstance(b, TextContent))
            print(json.dumps({"event": events[-1].type, "text": text, "pid": Seen.pid,
                              "error": message.error_message, "result": Seen.result}),
                  flush=True)

    asyncio.run(main())
    """
)


class Host:
    """One host process, started with the test's environment (agy-sim, its state folder, the
    shared session store) and the warm pool on."""

    def __init__(self, folder: Path, name: str) -> None:
        script = folder / "host.py"
        script.write_text(HOST)
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def turn(self, prompt: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(prompt + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"host {self.name} exited (code {self.proc.wait()})"
        outcome: dict[str, Any] = json.loads(line)
        return outcome

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.slow
def test_two_hosts_taking_turns_on_one_conversation_each_see_the_others_turns(
    live_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGY_WARM", "1")
    hosts = [Host(tmp_path, "A"), Host(tmp_path, "B")]
    outcomes: list[dict[str, Any]] = []
    try:
        for number in range(6):
            host = hosts[number % 2]
            outcomes.append(host.turn(f"turn {number + 1} from host {host.name}"))
        outcomes.append(hosts[0].turn("turn 7 from host A, right after its own"))
        outcomes.append(hosts[0].turn("turn 8 from host A, right after its own"))
    finally:
        for host in hosts:
            host.close()

    for number, outcome in enumerate(outcomes, start=1):
        assert outcome["event"] == "done", (number, outcome["error"])
        assert outcome["text"] == scenario_answer("default")
        # agy's own count of the conversation's turns: every turn before it, both hosts'.
        assert outcome["result"]["num_turns"] == number, (number, outcome["result"])
    assert len({o["result"]["conversation_id"] for o in outcomes}) == 1
    pids = [o["pid"] for o in outcomes]
    # Each host's next turn came after the other's: its idle agy was replaced, never reused...
    assert len(set(pids[:6])) == 6
    # ...but a host's turn right after its own keeps its agy.
    assert pids[6] == pids[7]
