"""What a live turn is made of, apart from its driver: the edges it touches (real by default,
fakes in tests), the plan `prepare` makes, what `launch` started, and agy's state folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agy_provider.agy.state_folder import chosen_state_folder
from agy_provider.contract.turn import Binding
from agy_provider.contract.turn import TurnProcess
from agy_provider.live.discovery import bind_database
from agy_provider.live.runner import TurnRequest
from agy_provider.live.runner import agy_version
from agy_provider.live.runner import find_agy
from agy_provider.live.warm.turn import spawn_turn
from agy_provider.plugin_manager import EventSourceSpec
from agy_provider.plugin_manager import event_sources
from agy_provider.store.config import Config
from agy_provider.store.config import load_config
from agy_provider.store.sessions import SessionStore

if TYPE_CHECKING:
    from agy_provider.live.handover import SourceHandover

__all__ = ["Launched", "TurnEdges", "TurnPlan", "state_dir"]


@dataclasses.dataclass(slots=True)
class TurnEdges:
    """Everything a turn touches outside itself. Defaults are the real ones."""

    store: SessionStore = dataclasses.field(default_factory=SessionStore)
    spawn: Callable[[TurnRequest], TurnProcess] = spawn_turn  # warm where the request allows
    bind: Callable[..., Awaitable[Binding]] = bind_database
    sources: Callable[[], Mapping[str, EventSourceSpec]] = event_sources
    find_agy: Callable[[str], str] = find_agy
    version: Callable[[str], Awaitable[str]] = agy_version
    config: Callable[[], Config] = load_config


@dataclasses.dataclass(frozen=True, slots=True)
class TurnPlan:
    """What `prepare` decided: settings, session, prompt, source and agy's command line."""

    config: Config
    state_dir: str  # agy's state folder ("" = agy's default), where its databases appear
    session_id: str
    resume: bool
    conversation_id: str
    min_index: int
    prompt: str
    source_name: str
    request: TurnRequest
    # Whether the turn offers agy tools (the host's `context.tools`, or plugins' through
    # `register_host_tools`): the MCP bridge then starts before agy.
    offers_tools: bool = False
    plugin_tools: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Launched:
    """What `launch` started: agy's process for the plan, the database it bound, the turn's
    event sources, and agy's own clock for the turn (`--print-timeout`, from `started_at`)."""

    plan: TurnPlan
    process: TurnProcess
    binding: Binding
    handover: SourceHandover
    started_at: float  # the loop's time when agy was spawned
    print_timeout: float

    @property
    def agy_deadline(self) -> float:
        """When agy's own clock ends the turn, on the loop's clock."""
        return self.started_at + self.print_timeout


def state_dir(config: Config, binary: str) -> str:
    """The state folder agy writes and we watch, told to agy explicitly whenever it is not agy's
    default: the configured one, `ANTIGRAVITY_APP_DATA_DIR`, or — for the bundled simulator —
    the simulator's own folder (agy-sim never writes into the real agy's state by default)."""
    return chosen_state_folder(binary, config.app_data_dir)
