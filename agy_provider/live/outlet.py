"""Where a live turn's events go: the host's stream (a resumed turn's new one) and the
`observe_event` hooks, and the final event with the turn's facts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from agy_provider.agy.step import TurnOutcome
from agy_provider.live.provider import bare_error
from agy_provider.live.settle import final_message
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.events import StartEvent
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.stream import TurnFacts
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Model

if TYPE_CHECKING:
    from agy_provider.contract.turn import TurnContext

__all__ = ["EventOutlet"]

log = logging.getLogger("agy_provider.live.turn")  # what hosts filter on for a turn's story


class EventOutlet:
    """Pushes a turn's events to `stream` and shows each to the observers of the turn's
    context (once planning made it: `observe`); an observer's failure is logged once per turn."""

    def __init__(self, stream: AssistantMessageEventStream, model: Model) -> None:
        self.stream = stream
        self.model = model
        self._observers: tuple[TurnContext, Any] | None = None  # the turn's context, its hooks
        self._observer_failed = False

    def observe(self, ctx: TurnContext, pm: Any) -> None:
        """Show events to `pm`'s `observe_event` hooks, with `ctx` (the turn planned anew: the
        new context). One assignment: planning runs in a worker thread."""
        self._observers = (ctx, pm)

    def follow(self, stream: AssistantMessageEventStream) -> None:
        """Events go to `stream` from now on (a resumed turn's new call)."""
        self.stream = stream

    def tell(self, facts: TurnFacts) -> None:
        """The stream's facts of the turn (read by the host with its final event)."""
        self.stream.facts = facts

    def emit(self, events: Sequence[AssistantMessageEvent]) -> None:
        observers = self._observers
        for event in events:
            if not isinstance(event, StartEvent):
                self.stream.push(event)
            if observers is not None:
                ctx, pm = observers
                try:
                    pm.hook.observe_event(event=event, turn=ctx)
                except Exception:  # an observer's bug must not cost the host its events
                    if not self._observer_failed:
                        self._observer_failed = True
                        log.exception("an observe_event hook failed (at %s); ignored", event.type)

    def deliver(
        self, events: list[AssistantMessageEvent], outcome: TurnOutcome, facts: TurnFacts
    ) -> AssistantMessage | None:
        """Emit the turn's last events (the final one among them, unless the assembler had
        finished already: then a bare one says what happened); returns the final message."""
        self.tell(facts)
        self.emit(events)
        if not self.stream.done:
            self.stream.push(
                ErrorEvent(
                    reason="aborted" if outcome.aborted else "error",
                    error=bare_error(self.model, outcome.error or "the turn failed"),
                )
            )
        return final_message(events)
