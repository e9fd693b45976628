"""The turn as plugins see it: `TurnContext` (the `turn` every hook is given), the `Binding` it
holds (the database the turn reads) and `TurnProcess` (the running agy). Nothing here runs a turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

if TYPE_CHECKING:
    import asyncio

    import psutil

    from agy_provider.agy.argv import TurnRequest
    from agy_provider.agy.stdout import StdoutEvents
    from agy_provider.agy.step import StepUsage
    from agy_provider.store.config import Config

__all__ = ["Binding", "ColdStartWait", "TurnContext", "TurnProcess"]


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """The database a turn reads: its path and the conversation id it proved to hold."""

    path: Path
    conversation_id: str


@dataclasses.dataclass(slots=True)
class TurnContext:
    """What plugins see of a turn (`turn` in hooks): its request, settings, and what it bound.

    The core fills it in as the turn goes; a plugin reads it, and tells the core what it found
    through the callbacks here (`report_endpoint`), never by setting a field.
    """

    session_id: str
    prompt: str
    cwd: str
    config: Config
    event_source: str  # the source asked for (a name, or "auto")
    permissions: str
    min_index: int = -1
    binding: Binding | None = None
    process: TurnProcess | None = None  # the running agy, once launched
    # The language server an rpc turn bound (for observers), never a token: its source reports
    # it through `report_endpoint`.
    endpoint: str = ""
    # How the conversation was chosen: "session" (the host's session id), "mark" (the
    # transcript's newest agy message proved it) or "new"; and a conversation agy no longer had.
    continuity: str = "new"
    lost_conversation: str = ""
    # The event source the turn reads now: chosen at launch, updated on every handover.
    source: str = ""

    def report_endpoint(self, url: str) -> None:
        """A source's callback: it bound agy's language server at `url` (an address, no token)."""
        self.endpoint = url


class ColdStartWait(Protocol):
    """A turn's place in line for a cold start of agy (`live/admission.TurnAdmission`)."""

    @property
    def waited(self) -> float:
        """Seconds the turn waited in line for a cold start (0.0 when it waited for none)."""
        ...

    @property
    def queued(self) -> bool:
        """True while the turn waits in line (an abort then has no agy to end)."""
        ...


class TurnProcess(Protocol):
    """What a turn and its plugins need of a running agy (`runner.AgyProcess`, a warm agy's
    `WarmTurn`; tests pass a fake)."""

    request: TurnRequest
    id_stated: asyncio.Event

    @property
    def pid(self) -> int:
        """agy's process id (a warm agy's: the process serving this turn)."""
        ...

    @property
    def admission(self) -> ColdStartWait: ...

    @property
    def previous_total(self) -> StepUsage | None:
        """agy's running usage total before this turn: a warm agy's `result` totals run over
        its process's turns, so this turn's usage is result(N) − result(N−1) (AGY-FORMATS
        §2.2); None for an agy that runs one turn."""
        ...

    @property
    def events(self) -> StdoutEvents:
        """What agy's stdout said, this turn's only: its id, `result`, and the raw event lines a
        stdout source reads (a warm agy's turn object feeds its own; `step_index` cumulative)."""

    @property
    def returncode(self) -> int | None: ...

    @property
    def stated_conversation_id(self) -> str: ...

    @property
    def result(self) -> Mapping[str, Any] | None: ...

    async def start(self) -> None: ...

    async def wait(self, timeout: float | None = None) -> int | None: ...

    async def terminate(self, grace: float = 2.0) -> None: ...

    async def scan_tree(self) -> list[psutil.Process]: ...

    def stderr_text(self) -> str: ...

    def stdout_text(self) -> str: ...
