"""The stream-json event source: the Step snapshots agy's own stdout gives while a turn runs.

Reads the event lines `agy.stdout.StdoutEvents` keeps, incrementally, through one stateful
`agy.streamjson` decoder: text, tool steps, usage and the turn's end — never thinking text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

from agy_provider.agy.stdout import MAX_EVENT_BYTES
from agy_provider.agy.stdout import StdoutEvents
from agy_provider.agy.step import Step
from agy_provider.errors import DecodeError
from agy_provider.errors import SourceError
from agy_provider.hookspecs import hookimpl

if TYPE_CHECKING:
    from agy_provider.contract.sources import RegisterEventSource
    from agy_provider.contract.turn import TurnContext

__all__ = ["FLUSH_EVERY", "StreamJsonEventSource", "register_event_sources"]

log = logging.getLogger(__name__)

# A long answer's text is snapshotted again at most this often while its deltas stream (below
# `streamjson.COALESCE_FROM` characters, or when it doubled, at once): a snapshot copies the whole
# text, so per-delta snapshots of a 1 MB answer would make every delta cost a megabyte. 30 ms is
# below what a reader notices and keeps the copying per second bounded whatever the delta rate.
FLUSH_EVERY: Final = 0.03


@hookimpl
def register_event_sources(register: RegisterEventSource) -> None:
    register("stream-json", StreamJsonEventSource.for_turn, stdout=True)


class StreamJsonEventSource:
    """One turn's reader of agy's stream-json stdout (`StdoutEvents`, fed by whoever reads agy).

    `poll()` decodes only the lines added since the last call and returns the newest snapshot of
    each step they changed. Works with any `events` whose `step_index` values are the
    conversation's (as the database's row indices are): a `-p` turn's stdout, or a warm agy's
    turn fed only that turn's bytes, with or without `init`.
    """

    name = "stream-json"
    deciding = 0  # stdout is one-way: nobody is asked anything through it

    def __init__(
        self, events: StdoutEvents | None, *, min_index: int = -1, why_not: str = ""
    ) -> None:
        # Imported here, not with the plugin: only turns that read stdout pay for the decoder.
        from agy_provider.agy.streamjson import StreamJsonDecoder

        self.events = events
        self._why_not = why_not
        self._decoder = StreamJsonDecoder(coalesce=True, on_skip=self._skipped)
        self._cursor = 0  # lines of `events` decoded so far
        self._max_seen = min_index
        self._open_steps: set[int] = set()  # indices seen last in a state that can change
        self._deferred = False  # lines decoded whose text snapshots the decoder still holds
        self._flush_at = 0.0
        self._ended = False  # the decoder was told the stream ended
        self._changed = asyncio.Event()
        self.skipped = 0

    @classmethod
    def for_turn(cls, turn: TurnContext) -> StreamJsonEventSource:
        process = turn.process
        if process is None:  # the core makes sources once agy runs
            why = "agy's stdout is not read: agy is not running"
            return cls(None, min_index=turn.min_index, why_not=why)
        output = process.request.output_format
        if output != "stream-json":
            # agy older than 1.1.8 has no stream-json; an agy run for text or json prints none.
            why = f"agy was run with --output-format {output or 'text'}, which has no step events"
            return cls(None, min_index=turn.min_index, why_not=why)
        source = cls(process.events, min_index=turn.min_index, why_not="agy's stdout is not read")
        # A warm agy's `result` totals run over its process's turns: the total before this turn
        # makes this turn's usage result(N) − result(N−1) (AGY-FORMATS §2.2).
        source._decoder.set_previous_total(process.previous_total)
        return source

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self.events is None:
            raise SourceError(
                f"the stream-json event source cannot read this turn: {self._why_not}"
            )
        self.events.add_listener(self._changed.set)

    async def aclose(self) -> None:
        if self.events is not None:
            self.events.remove_listener(self._changed.set)

    async def cancel(self) -> None:
        """Nothing to tell agy over its stdout (one-way); the runner stops the process."""

    async def wait(self, timeout: float) -> None:
        """Until new lines arrive, or a held-back snapshot is due, at most `timeout` seconds."""
        events = self.events
        if events is not None and (self._cursor < events.line_count or self._due_end(events)):
            return
        if self._deferred:
            timeout = min(timeout, max(0.0, self._flush_at - asyncio.get_running_loop().time()))
        try:
            async with asyncio.timeout(timeout):  # not wait_for: no task per wait
                await self._changed.wait()
        except TimeoutError:
            pass
        self._changed.clear()

    # -- reading -----------------------------------------------------------------------------

    async def poll(self, *, force: bool = False) -> list[Step]:
        """The newest snapshot of each step changed since the last call; `force` also gives what
        is held back. Raises `SourceError` once the kept lines are used up and they are not the
        whole turn: agy's stdout passed the bound (`StdoutEvents.incomplete`), or it ended
        without a `result`; the handover then asks the database."""
        events = self.events
        if events is None:
            raise RuntimeError("poll() before open()")
        lines = events.lines_from(self._cursor)
        self._cursor += len(lines)
        newest: dict[int, Step] = {}
        for line in lines:
            try:
                items = self._decoder.feed_line(line)
            except DecodeError as exc:
                self._skipped(f"line {self._cursor}: skipped, {exc}")
                continue
            self._take(items, newest)
        self._deferred = self._deferred or bool(lines)
        now = asyncio.get_running_loop().time()
        if self._due_end(events):
            self._ended = True
            self._take(self._decoder.end_of_input(), newest)
            self._deferred = False
        elif self._deferred and (force or now >= self._flush_at):
            self._take(self._decoder.flush(), newest)
            self._deferred = False
            self._flush_at = now + FLUSH_EVERY
        if not newest and self._cursor >= events.line_count:
            self._check_whole(events)
        return [newest[index] for index in sorted(newest)]

    @staticmethod
    def _check_whole(events: StdoutEvents) -> None:
        """Raise `SourceError` when what was kept (all of it read) is not the whole turn."""
        if events.incomplete:
            raise SourceError(
                f"agy's stdout passed {MAX_EVENT_BYTES} bytes of events in this turn (or could "
                "not be read); the rest of the turn is not in it"
            )
        if events.ended and events.result is None:
            # agy died mid-turn, or printed no stream-json at all (older than 1.1.8): what it
            # wrote elsewhere (its database) may say more.
            raise SourceError("agy's stdout ended without the turn's result")

    @property
    def chars_joined(self) -> int:
        """Characters copied to build snapshot texts so far: the decoder's work (linear)."""
        return self._decoder.chars_joined

    def _due_end(self, events: StdoutEvents) -> bool:
        return events.ended and not self._ended and self._cursor >= events.line_count

    def _take(self, items: list[Any], newest: dict[int, Step]) -> None:
        for item in items:
            if not isinstance(item, Step):
                continue  # the TurnOutcome of a `result`: agy's verdict comes from the runner
            index = item.index
            newest[index] = item
            self._max_seen = max(self._max_seen, index)
            # As for the database's rows (`Step.final`): agy may print an empty planner DONE
            # and fill it in later, so only a terminal step with content is final.
            if item.final:
                self._open_steps.discard(index)
            else:
                self._open_steps.add(index)

    def _skipped(self, reason: str) -> None:
        self.skipped += 1
        log.debug("stream-json source: %s", reason)

    def last_final_index(self, after: int = -1) -> int:
        """The highest index below which every step seen past `after` is final."""
        return min([self._max_seen, *[i - 1 for i in self._open_steps if i > after]])
