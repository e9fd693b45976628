"""The live side of the simulated language server: hosted conversations and their streams.

Owns each hosted conversation's run status and change notifications, StreamAgentStateUpdates as
a state machine (wait while idle → replay → a frame per change → clean end) and the frame faults.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Final
from typing import Protocol

from agy_provider.sim.step_reader import ConversationSteps
from agy_provider.sim.step_reader import RowKey
from agy_provider.sim.step_reader import stream_shape
from agy_provider.wire.connect import encode_envelope
from agy_provider.wire.connect import encode_json_envelope

_log = logging.getLogger("agy_provider.sim.server")

__all__ = [
    "RUNNING_POLL_INTERVAL_S",
    "RUN_STATUS_IDLE",
    "RUN_STATUS_RUNNING",
    "STREAM_TRANSITIONS",
    "AgentStateStream",
    "Conversation",
    "FrameSink",
    "FrameWriter",
    "ServerFaults",
    "StreamPhase",
    "present",
]

# While a turn runs, a stream also polls `PRAGMA data_version` this often, in case a `changed`
# notification is late or lost; it costs one pragma per tick when nothing moved.
RUNNING_POLL_INTERVAL_S: Final = 0.05
# Pause between some pieces of a split frame, so they reach the client in separate reads.
_SPLIT_PAUSE_S: Final = 0.003
_SPLIT_PAUSE_EVERY: Final = 8

RUN_STATUS_IDLE: Final = "CASCADE_RUN_STATUS_IDLE"
RUN_STATUS_RUNNING: Final = "CASCADE_RUN_STATUS_RUNNING"


class FrameSink(Protocol):
    """Where a server stream's bytes go: the HTTP response body."""

    async def send(self, data: bytes) -> None:
        """Send bytes now (the first call also sends the 200 head)."""
        ...

    async def drop(self) -> None:
        """Close the connection without ending the response: a dropped stream."""
        ...


@dataclass
class Conversation:
    """A conversation this server hosts, as announced by the parent."""

    id: str
    trajectory_id: str
    steps: ConversationSteps
    status: str = RUN_STATUS_IDLE
    turns_started: int = 0
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        """Whether a turn is running (agy says RUNNING while a permission prompt is open too)."""
        return self.status == RUN_STATUS_RUNNING

    @property
    def wakeup(self) -> asyncio.Event:
        """Set at the next change; grab it before checking state, then wait on it."""
        return self._wakeup

    def notify(self) -> None:
        """Wake every stream watching this conversation."""
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def set_status(self, running: bool) -> None:
        """Record a turn starting or settling (the parent's `status` notification)."""
        if running and not self.running:
            self.turns_started += 1
        self.status = RUN_STATUS_RUNNING if running else RUN_STATUS_IDLE
        self.notify()


@dataclass(frozen=True)
class ServerFaults:
    """The scenario's `"server"` faults, e.g. `{"stream_drop_after": 2, "split_frames": 7}`.

    `stream_drop_after` K: the first `stream_drop_times` (default 1) streams close their connection
    after K data frames, mid-turn, without an end frame. `split_frames` N (or true = 1): every
    envelope goes out in pieces of 1..N bytes (`seed` picks the sizes), each its own write.
    `malformed_frame_after` K: after K data frames a stream sends one data frame whose JSON is
    broken, then goes on.
    """

    stream_drop_after: int | None = None
    stream_drop_times: int = 1
    split_frames: int | None = None
    malformed_frame_after: int | None = None
    seed: int = 0

    @classmethod
    def from_json(cls, raw: object) -> ServerFaults:
        """Read the scenario's `"server"` object; unknown keys and bad values are ignored."""
        if not isinstance(raw, Mapping):
            return cls()

        def count(key: str) -> int | None:
            value = raw.get(key)
            if isinstance(value, bool):
                return 1 if value else None
            if isinstance(value, int) and value > 0:
                return value
            return None

        return cls(
            stream_drop_after=count("stream_drop_after"),
            stream_drop_times=count("stream_drop_times") or 1,
            split_frames=count("split_frames"),
            malformed_frame_after=count("malformed_frame_after"),
            seed=count("seed") or 0,
        )


class StreamPhase(enum.Enum):
    """Where one StreamAgentStateUpdates call is (field guide §4.4)."""

    WAITING = "waiting"  # opened while idle: no frame at all until a turn starts
    LIVE = "live"  # replayed every step, now a frame per change
    ENDED = "ended"  # the turn settled: last frame, clean end-of-stream
    DROPPED = "dropped"  # a `stream-drop` fault closed the connection with no end frame


STREAM_TRANSITIONS: Final[Mapping[StreamPhase, frozenset[StreamPhase]]] = {
    StreamPhase.WAITING: frozenset({StreamPhase.LIVE, StreamPhase.ENDED}),
    StreamPhase.LIVE: frozenset({StreamPhase.LIVE, StreamPhase.ENDED, StreamPhase.DROPPED}),
    StreamPhase.ENDED: frozenset(),
    StreamPhase.DROPPED: frozenset(),
}


def present(**fields: Any) -> dict[str, Any]:
    """The fields that protojson (agy's Go server) would print: zero values are omitted."""
    return {k: v for k, v in fields.items() if v not in ("", 0, False, None, [], {})}


def _same(sent: RowKey | None, current: RowKey | None) -> bool:
    return sent is current or sent == current


class FrameWriter:
    """Writes a server's stream frames, applying the scenario's frame faults."""

    def __init__(self, faults: ServerFaults) -> None:
        self.faults = faults
        self._drops_done = 0
        self._rng = random.Random(faults.seed)

    def should_drop(self, frames_sent: int) -> bool:
        """Whether a stream that has sent `frames_sent` data frames drops now (counted)."""
        limit = self.faults.stream_drop_after
        if (
            limit is None
            or frames_sent < limit
            or self._drops_done >= self.faults.stream_drop_times
        ):
            return False
        self._drops_done += 1
        return True

    async def write(self, sink: FrameSink, frame: bytes) -> None:
        """Send one envelope, whole or (the `split_frames` fault) in several small writes."""
        pieces = self.faults.split_frames
        if pieces is None:
            await sink.send(frame)
            return
        position = count = 0
        while position < len(frame):
            size = self._rng.randint(1, max(1, pieces))
            await sink.send(frame[position : position + size])
            position += size
            count += 1
            # Each piece is its own HTTP chunk, which the client reads apart anyway; a real pause
            # now and then also splits the TCP reads without making a large replay crawl.
            await asyncio.sleep(_SPLIT_PAUSE_S if count % _SPLIT_PAUSE_EVERY == 1 else 0)


class AgentStateStream:
    """One StreamAgentStateUpdates call: what it has sent, and the phase it is in.

    `conversations` is the server's live table, so a re-announced conversation is followed.
    When `closing` is set the stream sends what changed (and its clean end, if the turn has
    settled) and stops; a turn still running is cut without an end frame.
    """

    def __init__(
        self,
        conversations: Mapping[str, Conversation],
        conversation: Conversation,
        sink: FrameSink,
        client_gone: asyncio.Event,
        writer: FrameWriter,
        closing: asyncio.Event,
        page: tuple[int, int | None] = (0, None),
    ) -> None:
        self.conversations = conversations
        self.page = page  # the steps the first frame replays: [start, end)
        self.closing = closing
        self.writer = writer
        self.conversation = conversation
        self.sink = sink
        self.client_gone = client_gone
        self.phase = StreamPhase.WAITING
        self.sent: dict[int, RowKey | None] = {}
        self.frames_sent = 0

    def _enter(self, phase: StreamPhase) -> None:
        if phase not in STREAM_TRANSITIONS[self.phase]:
            raise RuntimeError(f"stream cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    async def run(self) -> StreamPhase:
        """Serve the stream until it ends, drops or its client leaves; how it finished."""
        conversation = self.conversation
        turns_at_open = conversation.turns_started
        # Each wakeup event is taken before the state it guards is read, so a change that lands
        # while a frame is being written still wakes the next wait.
        wakeup = conversation.wakeup
        while not conversation.running and conversation.turns_started == turns_at_open:
            if await self._wait(wakeup, None) or self.closing.is_set():
                return self.phase
            conversation = self._current()
            wakeup = conversation.wakeup
        replay = True
        while True:
            conversation.steps.refresh()
            if not await self._send_changes(replay=replay):
                return self.phase
            replay = False
            if self.closing.is_set():
                # The server is going away mid-turn (agy exited): no end frame, as with agy.
                return self.phase
            timeout = RUNNING_POLL_INTERVAL_S if conversation.running else None
            if await self._wait(wakeup, timeout):
                return self.phase
            conversation = self._current()
            wakeup = conversation.wakeup

    def _current(self) -> Conversation:
        # A re-announced conversation (resume) replaces the object; follow it.
        latest = self.conversations.get(self.conversation.id, self.conversation)
        self.conversation = latest
        return latest

    async def _wait(self, wakeup: asyncio.Event, timeout: float | None) -> bool:
        """Wait for a change, the server closing or the timeout; True when the client left."""
        waits = [
            asyncio.ensure_future(wakeup.wait()),
            asyncio.ensure_future(self.client_gone.wait()),
            asyncio.ensure_future(self.closing.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        return self.client_gone.is_set()

    async def _send_changes(self, *, replay: bool) -> bool:
        """Send the replay or the changed steps; False when the stream is over."""
        conversation = self.conversation
        steps = conversation.steps
        running = conversation.running
        # Unchanged rows keep their version object: identity answers for all but the few that
        # changed since the last frame, and only those (or, in the replay, every row) render.
        start, end = self.page
        if replay:  # the replay: every step within the page the client asked for
            changed = [i for i in steps.indices() if start <= i and (end is None or i < end)]
        else:
            changed = [i for i in steps.indices() if not _same(self.sent.get(i), steps.version(i))]
        current = steps.rendered(changed)
        if not replay and not current and running:
            return True
        self._enter(StreamPhase.LIVE if running else StreamPhase.ENDED)
        status = RUN_STATUS_RUNNING if running else RUN_STATUS_IDLE
        steps_update = present(
            indices=[i for i, _ in current],
            steps=[stream_shape(step) for _, step in current],
            totalLength=len(steps),
            pageBounds=present(startIndex=start, endIndexExclusive=end) if replay else None,
        )
        main_update = {
            "stepsUpdate": steps_update,
            **present(status=status, fullyIdle=not running),
        }
        update = present(
            conversationId=conversation.id,
            trajectoryId=conversation.trajectory_id,
            status=status,
            mainTrajectoryUpdate=main_update,
            fullyIdle=not running,
        )
        await self.writer.write(self.sink, encode_json_envelope({"update": update}))
        # After the replay every row counts as sent, those outside the page too: only their
        # later changes go out, as agy streams them.
        sent = steps.indices() if replay else [i for i, _ in current]
        self.sent.update((i, steps.version(i)) for i in sent)
        self.frames_sent += 1
        if not running:
            await self.writer.write(self.sink, encode_json_envelope({}, end_stream=True))
            return False
        if self.frames_sent == self.writer.faults.malformed_frame_after:
            # A data frame whose JSON is cut short: a client must skip it and read on.
            await self.writer.write(self.sink, encode_envelope(b'{"update": {"conversationId": '))
        if self.writer.should_drop(self.frames_sent):
            _log.info(
                "stream fault: dropped StreamAgentStateUpdates after %d frames", self.frames_sent
            )
            self._enter(StreamPhase.DROPPED)
            await self.sink.drop()
            return False
        return True
