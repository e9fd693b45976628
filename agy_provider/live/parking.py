"""Host-tool parking: the registry of turns waiting for the host's tool results, and what a turn
says when the program stopped waiting for it.
"""

from __future__ import annotations

from agy_provider.bridge.host_tools import ParkedTurns

__all__ = ["PARKED", "STOPPED_WAITING"]

STOPPED_WAITING = (
    "the program stopped waiting for its turns before the host answered agy's tool call"
)


# Turns waiting for the host to run the tools agy called (pi's tool-use loop): the host's next
# `stream_simple`, whose context ends in those calls' results, resumes its turn from here.
PARKED = ParkedTurns()
