"""A turn's options as frozen values: `TurnOptions` (`stream_simple`'s keywords, read once and
passed down to the planner); one host call's part is the contract's `HostCall`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agy_provider.bridge.host_tools import ToolExecutor
    from agy_provider.live.turn_edges import TurnEdges
    from agy_provider.store.sessions import SessionStore

__all__ = ["TurnOptions"]


@dataclasses.dataclass(frozen=True, slots=True)
class TurnOptions:
    """How a turn runs beyond pi's own options: `stream_simple`'s keywords, as it was given them.

    A turn keeps its `TurnOptions` for its whole life, across host-tool round trips (a resumed
    turn's new call brings a new `HostCall`, never new options). Adding a turn option is one
    field here, `stream_simple`'s keyword, and the code that reads it (`tests/test_turn_options`
    pins the keywords to the fields). Light on purpose: the types it names load only for type
    checkers.
    """

    cwd: str | None = None  # agy's folder, absolute (`checked_cwd`); None: the current folder
    agy_bin: str | None = None
    event_source: str | None = None
    store: SessionStore | None = None  # the session store; overrides `edges.store`
    continue_session: bool = False
    edges: TurnEdges | None = None  # None: the real ones
    tool_executor: ToolExecutor | None = None  # runs agy's host-tool calls at once
    conversation_id: str = ""  # an agy conversation the caller names (continued)

    @property
    def continues(self) -> bool:
        """The turn resumes its session's (or the named) conversation whatever the history."""
        return self.continue_session or bool(self.conversation_id)

    @property
    def host_runs_tools(self) -> bool:
        """No executor runs the host's tools: the host itself does (between two calls)."""
        return self.tool_executor is None

    def in_folder(self) -> TurnOptions:
        """These options with `cwd` named: the current folder when the host gave none."""
        return self if self.cwd else dataclasses.replace(self, cwd=os.getcwd())

    def turn_edges(self) -> TurnEdges:
        """The edges the turn touches: `edges` (the real ones by default) with `store` in them.

        A new value: an `edges` the caller may use again is never changed."""
        from agy_provider.live.turn_edges import TurnEdges

        if self.store is None:
            return self.edges or TurnEdges()
        if self.edges is None:
            return TurnEdges(store=self.store)
        return dataclasses.replace(self.edges, store=self.store)
