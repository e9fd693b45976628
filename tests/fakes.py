"""Fakes of a turn's edges for the driver's and its collaborators' tests: a scripted agy process,
event sources fed by the test, the `TurnEdges` that wire them, and a parked turn for the
parked-turn registry; milliseconds, no agy.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import StepUsage
from agy_provider.contract.parked import HostCall
from agy_provider.contract.sources import EventSourceFactory
from agy_provider.contract.turn import Binding
from agy_provider.errors import TurnError
from agy_provider.live.admission import TurnAdmission
from agy_provider.live.provider import stream_simple
from agy_provider.live.runner import StdoutEvents
from agy_provider.live.runner import TurnRequest
from agy_provider.live.turn_edges import TurnEdges
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import Model
from agy_provider.pi.types import ToolResultMessage
from agy_provider.pi.types import UserMessage
from agy_provider.plugin_manager import EventSourceSpec
from agy_provider.store.config import Config
from agy_provider.store.sessions import SessionStore

MODEL = Model(
    id="gemini-3.8-flash",
    name="Flash",
    api="agy",
    provider="agy",
    base_url="",
    reasoning=True,
    context_window=1_000_000,
    max_tokens=65_536,
)
CONVERSATION = "0b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d"
# Only bounds a hang: a correct driver never comes near it.
HANG = 20.0


def user(index: int, text: str = "hi") -> Step:
    return Step(index=index, kind=StepKind.USER, status=StepStatus.DONE, text=text)


def planner(index: int, text: str, status: StepStatus = StepStatus.DONE) -> Step:
    return Step(index=index, kind=StepKind.ASSISTANT, status=status, text=text)


class FakeProcess:
    """A scripted agy: `start` may block, `exit(code)` ends it, `terminate` records the grace."""

    def __init__(self, request: TurnRequest, script: Script) -> None:
        self.request = request
        self.script = script
        self.id_stated = asyncio.Event()
        self.returncode: int | None = None
        self.result: Mapping[str, Any] | None = None
        self.stated_conversation_id = ""
        self.events = StdoutEvents()
        self._exited = asyncio.Event()
        self.terminations: list[float] = []
        self.pid = 1_000_000 + len(script.processes)  # no real process has it (never signalled)
        self.admission = TurnAdmission()  # a fake agy never waits for a cold start slot
        self.previous_total: StepUsage | None = None  # one turn per fake agy
        script.processes.append(self)

    async def start(self) -> None:
        await self.script.start_gate.wait()
        self.stated_conversation_id = (
            self.script.stated.pop(0) if self.script.stated else CONVERSATION
        )
        self.id_stated.set()

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except TimeoutError:
            return None
        return self.returncode

    async def terminate(self, grace: float = 2.0) -> None:
        self.terminations.append(grace)
        if self.returncode is None:
            self.exit(-15)

    async def scan_tree(self) -> list[psutil.Process]:
        return []

    def stderr_text(self) -> str:
        return self.script.stderr

    def stdout_text(self) -> str:
        return ""


class FakeSource:
    """An event source fed by the test with `enqueue()`; `poll` may be made to hang."""

    name = "fake"
    deciding = 0

    def __init__(self, script: Script, turn: Any, name: str) -> None:
        self.name = name
        self.script = script
        self.turn = turn
        self.queue: list[Step] = []
        self.arrived = asyncio.Event()
        self.seen: dict[int, Step] = {}
        self.closed = False
        self.cancelled = False
        script.sources.append(self)

    async def open(self) -> None:
        if self.name in self.script.open_errors:
            raise self.script.open_errors[self.name]

    def enqueue(self, steps: Sequence[Step]) -> None:
        self.queue.extend(steps)
        self.arrived.set()

    async def poll(self, *, force: bool = False) -> list[Step]:
        if self.script.poll_gate is not None:
            if not self.script.poll_gate.is_set():
                self.script.poll_blocked.set()
            await self.script.poll_gate.wait()
        out, self.queue = self.queue, []
        self.seen.update((s.index, s) for s in out)
        return out

    async def wait(self, timeout: float) -> None:
        if not self.queue:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout)
        self.arrived.clear()

    async def cancel(self) -> None:
        self.cancelled = True

    def last_final_index(self, after: int = -1) -> int:
        return max(self.seen, default=self.turn.min_index)

    async def aclose(self) -> None:
        self.closed = True


@dataclasses.dataclass
class Script:
    """What the fakes do. Gates start open; close one to make that phase block."""

    start_gate: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    bind_gate: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    poll_gate: asyncio.Event | None = None
    poll_blocked: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)  # a poll waits
    open_errors: dict[str, Exception] = dataclasses.field(default_factory=dict)
    stderr: str = ""
    processes: list[FakeProcess] = dataclasses.field(default_factory=list)
    sources: list[FakeSource] = dataclasses.field(default_factory=list)
    binds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # The conversation ids the processes state, in order (then CONVERSATION).
    stated: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.start_gate.set()
        self.bind_gate.set()


def edges_for(script: Script, tmp_path: Path, *, names: Sequence[str] = ("sqlite",)) -> TurnEdges:
    async def bind(folder: Path, before: set[str], process: Any, **kw: Any) -> Binding:
        script.binds.append(kw)
        await script.bind_gate.wait()
        conversation = kw["expected_id"] or process.stated_conversation_id
        if kw["expected_id"] and process.stated_conversation_id != kw["expected_id"]:
            raise TurnError("agy was asked to resume one conversation but says it runs another")
        return Binding(path=folder / f"{conversation}.db", conversation_id=conversation)

    async def version(binary: str) -> str:
        return "1.2.13"

    def source(name: str) -> EventSourceFactory:
        return lambda turn: FakeSource(script, turn, name)

    specs = {
        n: EventSourceSpec(
            name=n,
            factory=source(n),
            plugin="test",
            database=n == "sqlite",
            language_server=n == "rpc",
        )
        for n in names
    }
    # agy has the conversation the fakes resume (a turn checks its database exists first).
    folder = tmp_path / "agy" / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CONVERSATION}.db").touch()
    return TurnEdges(
        store=SessionStore(tmp_path / "sessions.json"),
        spawn=lambda request: FakeProcess(request, script),
        bind=bind,
        sources=lambda: specs,
        find_agy=lambda configured: "/usr/bin/agy",
        version=version,
        config=lambda: Config(event_source=names[0], app_data_dir=str(tmp_path / "agy")),
    )


def start_turn(
    edges: TurnEdges,
    *,
    prompt: str = "hi",
    signal: AbortSignal | None = None,
    session: str = "",
    history: Sequence[Any] = (),
) -> Any:
    context = Context(messages=[*history, UserMessage(content=prompt, timestamp=0)])
    options = SimpleStreamOptions(session_id=session or None, signal=signal)
    return stream_simple(MODEL, context, options, edges=edges)


async def collect(stream: Any) -> list[AssistantMessageEvent]:
    async def drain() -> list[AssistantMessageEvent]:
        return [event async for event in stream]

    return await asyncio.wait_for(drain(), HANG)


async def until(condition: Any) -> None:
    async def check() -> None:
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(check(), HANG)


class Exits:
    """A process for the handover: `exited` says whether agy is gone."""

    def __init__(self, exited: bool = False) -> None:
        self.exited = exited

    async def wait(self, timeout: float | None = None) -> int | None:
        return 0 if self.exited else None


@dataclasses.dataclass(eq=False)  # a turn is itself, never equal to another one
class FakeParkedTurn:
    """A `contract/parked.ParkedTurn` that runs nowhere: it has an owner, is never resumed
    (`resume` says it no longer waits, as a turn that ended does), and records why it was ended."""

    session_id: str = ""
    conversation_id: str = ""
    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[None] | None = None
    ended: list[str] = dataclasses.field(default_factory=list)

    def resume(self, call: HostCall, results: dict[str, ToolResultMessage]) -> bool:
        return False

    async def end_parked(self, why: str) -> None:
        self.ended.append(why)
