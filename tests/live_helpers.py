"""Helpers for end-to-end turns against agy-sim: real processes, real databases, real files.

Expectations come from the scenario files (`agy_provider/sim/scenarios/*.json`), never from an
earlier run: `scenario_answer()` is the text a scenario's turn must end with, `expect_done()` and
`expect_error()` check a turn's events against it, and `leftovers()` names any process of this
test's turns still alive.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from agy_provider.agy.database import iter_step_rows
from agy_provider.agy.database import open_conversation_db
from agy_provider.agy.rows import decode_step_row
from agy_provider.agy.step import StepKind
from agy_provider.hookspecs import hookimpl
from agy_provider.live.provider import stream_simple
from agy_provider.live.provider import wait_for_turns
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import DoneEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Context
from agy_provider.pi.types import Model
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.sim.scenario import ErrorSpec
from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import load_scenario
from agy_provider.store.sessions import SessionStore

MODEL = Model(
    id="gemini-3.7-flash",
    name="Gemini 3.7 Flash",
    api="agy",
    provider="agy",
    base_url="",
    reasoning=True,
    context_window=1_000_000,
    max_tokens=65_536,
)

TERMINAL = ("done", "error")


def agy_sim_path() -> str:
    found = shutil.which("agy-sim") or os.path.join(os.path.dirname(sys.executable), "agy-sim")
    assert os.path.exists(found), "agy-sim is not installed beside this Python"
    return found


# --- what a scenario says --------------------------------------------------------------------


def scenario_answer(name: str, turn: int = 0) -> str:
    """The answer a scenario's turn gives: every planner's text chunks, in order."""
    steps = load_scenario(name).turn(turn).steps
    return "".join(chunk for s in steps if isinstance(s, PlannerSpec) for chunk in s.text)


def scenario_planners(name: str, turn: int = 0) -> list[str]:
    """Each planner's whole text, in order (empty for planners that only think or run tools)."""
    steps = load_scenario(name).turn(turn).steps
    return ["".join(s.text) for s in steps if isinstance(s, PlannerSpec)]


def scenario_chunks(name: str, planner: int = 0, turn: int = 0) -> list[str]:
    """The text chunks of one planner (0-based among the turn's planners), as agy-sim writes them."""
    steps = load_scenario(name).turn(turn).steps
    return list([s for s in steps if isinstance(s, PlannerSpec)][planner].text)


def scenario_error(name: str, turn: int = 0) -> ErrorSpec:
    """The failure a scenario's turn ends in."""
    (error,) = (s for s in load_scenario(name).turn(turn).steps if isinstance(s, ErrorSpec))
    return error


# --- checking a turn's events ----------------------------------------------------------------


def text_of(events: Sequence[AssistantMessageEvent]) -> str:
    """The answer as streamed: every text delta, concatenated."""
    return "".join(getattr(e, "delta", "") for e in events if e.type == "text_delta")


def final_text(message: AssistantMessage) -> str:
    """The answer as delivered: the final message's text blocks, concatenated."""
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def terminal(events: Sequence[AssistantMessageEvent]) -> AssistantMessageEvent:
    """The one terminal event (`done` or `error`), which must also be the last event."""
    kinds = [e.type for e in events]
    assert sum(k in TERMINAL for k in kinds) == 1, f"not exactly one terminal event: {kinds}"
    assert kinds[-1] in TERMINAL, f"the terminal event is not the last: {kinds}"
    return events[-1]


def expect_done(
    events: Sequence[AssistantMessageEvent], message: AssistantMessage, answer: str
) -> None:
    """The turn ended `done` with exactly `answer`, streamed as deltas and in the final message."""
    last = terminal(events)
    assert isinstance(last, DoneEvent), f"ended {last.type}: {message.error_message}"
    assert final_text(message) == answer
    assert text_of(events) == answer  # streamed == delivered, and both are the scenario's text


def expect_error(
    events: Sequence[AssistantMessageEvent], message: AssistantMessage, reason: str = "error"
) -> ErrorEvent:
    """The turn ended with one `error` event of `reason`, its message saying what failed."""
    last = terminal(events)
    assert isinstance(last, ErrorEvent), f"ended {last.type}, expected an error ({reason})"
    assert last.reason == reason and message.stop_reason == reason
    assert message.error_message, "an error event must say what failed"
    return last


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def live_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private agy state folder, config and session store; agy-sim as the agy binary."""
    app = tmp_path / "agy-state"
    monkeypatch.setenv("AGY_APP_DATA_DIR", str(app))
    monkeypatch.setenv("ANTIGRAVITY_APP_DATA_DIR", str(app))
    monkeypatch.setenv("AGY_PROVIDER_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("AGY_PROVIDER_SESSIONS", str(tmp_path / "sessions.json"))
    monkeypatch.setenv("AGY_BIN", agy_sim_path())
    monkeypatch.setenv("AGY_SIM_NO_SERVER", "1")
    monkeypatch.setenv("AGY_EVENT_SOURCE", "sqlite")
    monkeypatch.setenv("AGY_SIM_SPEED", "4")
    monkeypatch.delenv("AGY_SIM_SCENARIO", raising=False)
    return app


@dataclasses.dataclass
class Observed:
    """What a throwaway plugin saw of the turns: each event with whether agy was still running,
    each turn (its `TurnContext`), and every process seen in a turn's tree."""

    events: list[tuple[AssistantMessageEvent, bool]] = dataclasses.field(default_factory=list)
    turns: list[Any] = dataclasses.field(default_factory=list)
    processes: dict[int, psutil.Process] = dataclasses.field(default_factory=dict)


class Recorder:
    def __init__(self) -> None:
        self.seen = Observed()

    @hookimpl
    def observe_event(self, event: AssistantMessageEvent, turn: Any) -> None:
        process = getattr(turn, "process", None)
        running = process is not None and process.returncode is None
        self.seen.events.append((event, running))
        if not any(t is turn for t in self.seen.turns):
            self.seen.turns.append(turn)
        # The tree is read at the few events where a new process may have joined it (a scan
        # costs milliseconds; at every delta it would slow the turn it watches).
        if process is not None and running and event.type.endswith("start"):
            self._remember_tree(process.pid)

    def _remember_tree(self, pid: int) -> None:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in tree:
            self.seen.processes.setdefault(proc.pid, proc)


@pytest.fixture
def recorder() -> Iterator[Observed]:
    pm = get_plugin_manager()
    plugin = Recorder()
    pm.register(plugin, name="test-recorder")
    yield plugin.seen
    pm.unregister(name="test-recorder")


# --- running a turn ----------------------------------------------------------------------------


async def run_turn(
    prompt: str,
    *,
    session: str = "",
    history: list[Any] | None = None,
    signal: AbortSignal | None = None,
    store: SessionStore | None = None,
    cwd: str | None = None,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    messages = [*(history or []), UserMessage(content=prompt, timestamp=0)]
    stream = stream_simple(
        MODEL,
        Context(messages=messages),
        SimpleStreamOptions(session_id=session or None, signal=signal),
        store=store,
        cwd=cwd,
    )
    events = [event async for event in stream]
    message = await stream.result()
    await wait_for_turns()  # the session is saved after the final event
    return events, message


# --- processes ---------------------------------------------------------------------------------


def _alive(proc: psutil.Process) -> bool:
    try:
        # is_running() also compares the creation time, so a reused pid is not taken for ours.
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def agy_processes(app: Path) -> list[psutil.Process]:
    """Live processes whose environment or command line mention this test's agy state folder."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            blob = " ".join(proc.info["cmdline"] or []) + " ".join(
                f"{k}={v}" for k, v in (proc.info["environ"] or {}).items()
            )
        except (psutil.Error, TypeError):
            continue
        if str(app) in blob and proc.pid != os.getpid() and _alive(proc):
            found.append(proc)
    return found


def warm_pool_pids() -> set[int]:
    """The processes of the warm agys this process's pool keeps (and spares), with their trees:
    agy kept for a conversation's next turn is the pool's, not a turn's leftover. A turn that
    ended otherwise than by agy's `result` ended its agy before its final event; one that ended by
    it lets go of its agy in its cleanup, just after (so `in_turn` counts as kept too)."""
    warm = sys.modules.get("agy_provider.live.warm.pool")
    if warm is None:
        return set()
    kept = (
        warm.WarmState.READY,
        warm.WarmState.STARTING,
        warm.WarmState.SPARE,
        warm.WarmState.IN_TURN,
    )
    return {p.pid for agy in warm.POOL.agys() if agy.state in kept for p in agy.track()}


def leftovers(app: Path, seen: Observed | None = None) -> list[str]:
    """Every process of this test's turns still alive: agy, its server, anything they started.

    Two independent looks: processes carrying this test's private state folder (every agy-sim
    process does, orphans included), and the trees a `recorder` saw during the turns.
    """
    alive = {p.pid: p for p in agy_processes(app)}
    if seen is not None:
        alive.update({pid: p for pid, p in seen.processes.items() if _alive(p)})
    for pid in warm_pool_pids():
        alive.pop(pid, None)  # kept on purpose for the conversation's next turn
    described = []
    for pid, proc in sorted(alive.items()):
        try:
            described.append(f"{pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            continue  # it ended while we looked
    return described


# --- resumed conversations -----------------------------------------------------------------------


def seed_resumable(
    app: Path, store_path: Path, earlier_turns: int
) -> tuple[str, SessionStore, int]:
    """A conversation of `earlier_turns` complete turns in agy's state folder, and a session store
    whose "resume" session points at its last row: (conversation id, store, last row index)."""
    import uuid

    from agy_provider.sim.bulk import STEPS_PER_TURN
    from agy_provider.sim.bulk import write_conversation
    from agy_provider.store.sessions import SessionRecord

    conversation = str(uuid.uuid4())
    folder = app / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    write_conversation(folder / f"{conversation}.db", conversation, turns=earlier_turns).close()
    store = SessionStore(store_path)
    last = earlier_turns * STEPS_PER_TURN - 1
    store.put("resume", SessionRecord(conversation_id=conversation, last_step_index=last))
    return conversation, store, last


# --- agy versions -----------------------------------------------------------------------------

# The agy shapes a lean set of live tests runs on (`AGY_SIM_VERSION`): the 1.1.17 capture's,
# the default imitated (1.2.13), and the newest seen (1.3.3, AGY-FORMATS §2.3).
AGY_VERSIONS = ("1.1.17", "1.2.13", "1.3.3")


def recorded_user_inputs(app: Path, conversation: str) -> list[str]:
    """The user steps agy-sim recorded in the conversation's database, in order."""
    conn = open_conversation_db(app / "conversations" / f"{conversation}.db")
    try:
        steps = [
            decode_step_row(r.index, r.step_type, r.status, r.payload) for r in iter_step_rows(conn)
        ]
    finally:
        conn.close()
    return [s.text for s in steps if s.kind is StepKind.USER]
