"""The turn as plugins see it: `TurnContext` (the `turn` every hook is given) and the `Binding`
it holds, the database the turn reads. Values only: nothing here runs a turn.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from agy_provider.store.config import Config

__all__ = ["Binding", "TurnContext"]


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """The database a turn reads: its path and the conversation id it proved to hold."""

    path: Path
    conversation_id: str



@dataclasses.dataclass(slots=True)
class TurnContext:
    """What plugins see of a turn (`turn` in hooks): its request, settings, and what it bound."""

    session_id: str
    prompt: str
    cwd: str
    config: Config
    event_source: str  # the source asked for (a name, or "auto")
    permissions: str
    min_index: int = -1
    binding: Binding | None = None
    process: Any = None  # the running agy (`runner.AgyProcess`)
    endpoint: str = ""  # the language server an rpc turn bound (for observers), never a token
    # How the conversation was chosen: "session" (the host's session id), "mark" (the
    # transcript's newest agy message proved it) or "new"; and a conversation agy no longer had.
    continuity: str = "new"
    lost_conversation: str = ""
    # The event source the turn reads now: chosen at launch, updated on every handover.
    source: str = ""
