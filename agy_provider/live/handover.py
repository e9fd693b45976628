"""The source handover of one turn: which event source it reads and every move between them, in
one table that drives them, `(state, event) → (new state, action)`, fired in one place (`fire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping

from agy_provider.agy.step import Step
from agy_provider.contract.sources import EventSource
from agy_provider.contract.turn import TurnContext
from agy_provider.contract.turn import TurnProcess
from agy_provider.errors import AgyError
from agy_provider.errors import SourceError
from agy_provider.plugin_manager import EventSourceSpec

__all__ = [
    "TRANSITIONS",
    "Action",
    "Event",
    "HandoverError",
    "HandoverState",
    "SourceHandover",
    "database_source",
    "stdout_source",
]

log = logging.getLogger(__name__)

# After agy exits, keep reading until the database stops changing for this many polls.
_DRAIN_QUIET_POLLS = 3
# When the server stops answering, how long to wait for agy's exit to explain it.
_EXIT_GRACE = 1.0

Feed = Callable[[list[Step]], Awaitable[None]]


class HandoverState(enum.Enum):
    """Where a turn's events come from (or are about to, while the source named opens)."""

    OPENING = "opening"  # nothing chosen yet
    DIRECT = "direct"  # the database alone, chosen; agy's stdout is the last resort
    ALONE = "alone"  # another source alone: no database is registered to fall back to
    BESIDE = "beside"  # the database reads while the preferred source opens beside it
    PREFERRED = "preferred"  # the preferred source reads; the database is the fallback
    DATABASE = "database"  # fell back to the database; agy's stdout is the last resort
    STDOUT = "stdout"  # agy's stdout reads (chosen, or the last resort); the database after it
    LAST = "last"  # the database after agy's stdout: nothing left, its failure is the turn's
    CLOSED = "closed"


class Event(enum.Enum):
    """What happened to the handover."""

    CHOSE_DATABASE = "chose the database"
    CHOSE_ALONE = "chose a source with no database to fall back to"
    CHOSE_STDOUT = "chose agy's stdout"
    CHOSE_PREFERRED = "chose a source other than the database"
    CHOSEN_UP = "the chosen source opened"
    CHOSEN_DOWN = "the chosen source could not open"
    DATABASE_UP = "the database reader opened"
    DATABASE_DOWN = "the database reader could not open"
    PREFERRED_UP = "the preferred source opened"
    PREFERRED_DOWN = "the preferred source could not open"
    STDOUT_UP = "agy's stdout opened as the last resort"
    STDOUT_DOWN = "agy's stdout could not open as the last resort"
    FAILED = "the source failed while agy runs"
    FAILED_AFTER_EXIT = "the source failed and agy has exited"
    DRAIN = "agy exited: the final drain"
    REST_TAKEN = "the stream's rest taken, the database opened for the drain"
    REST_ONLY = "the stream's rest taken, the database cannot be read"
    STDOUT_ENDED = "agy's stdout said its whole turn"
    CLOSE = "the turn closes its sources"


class Action(enum.Enum):
    """What the handover does on a move (`SourceHandover._act`)."""

    NOTHING = "nothing"
    OPEN_CHOSEN = "open the chosen source"  # → CHOSEN_UP / CHOSEN_DOWN
    OPEN_BESIDE = "open the preferred source beside the database"  # → DATABASE_UP / _DOWN
    AWAIT_PREFERRED = "wait for the preferred source"  # → PREFERRED_UP / PREFERRED_DOWN
    USE_CHOSEN_DATABASE = "read the database the chosen source left"  # → DATABASE_UP / _DOWN
    FALL_BACK = "the source failed: open the database"  # → DATABASE_UP / DATABASE_DOWN
    TAKE_STDOUT = "open agy's stdout, the last resort"  # → STDOUT_UP / STDOUT_DOWN
    USE_DATABASE = "read the database, closing the failed source"
    USE_PREFERRED = "read the preferred source"
    USE_STDOUT = "read agy's stdout"
    DROP_PREFERRED = "the preferred source never came: the database goes on"
    RAISE = "the failure is the turn's"
    KEEP = "leave the failure to the drain"
    TAKE_REST = "take the stream's rest, open the database"  # → REST_TAKEN / REST_ONLY
    TAKE_STDOUT_REST = "read agy's stdout to its end"  # → STDOUT_ENDED / REST_TAKEN / _ONLY
    DRAIN_DATABASE = "read the database until it is quiet"
    RETIRE_AND_DRAIN = "read the database instead, until it is quiet"
    CLOSE_ALL = "close every source"


class HandoverError(RuntimeError):
    """An event the handover's table has no move for in its state (a bug of ours)."""


S, E, A = HandoverState, Event, Action
_READING_DATABASE = (S.DIRECT, S.BESIDE, S.DATABASE, S.LAST)
_STREAMING = (S.ALONE, S.PREFERRED, S.STDOUT)


def _table() -> dict[tuple[HandoverState, Event], tuple[HandoverState, Action]]:
    table = {
        # Opening: the state is where the turn means to read; it moves on once a source is up.
        (S.OPENING, E.CHOSE_DATABASE): (S.DIRECT, A.OPEN_CHOSEN),
        (S.OPENING, E.CHOSE_ALONE): (S.ALONE, A.OPEN_CHOSEN),
        (S.OPENING, E.CHOSE_STDOUT): (S.STDOUT, A.OPEN_CHOSEN),
        (S.OPENING, E.CHOSE_PREFERRED): (S.BESIDE, A.OPEN_BESIDE),
        (S.DIRECT, E.CHOSEN_UP): (S.DIRECT, A.NOTHING),
        (S.DIRECT, E.CHOSEN_DOWN): (S.DIRECT, A.TAKE_STDOUT),
        (S.ALONE, E.CHOSEN_UP): (S.ALONE, A.NOTHING),
        (S.ALONE, E.CHOSEN_DOWN): (S.ALONE, A.TAKE_STDOUT),
        (S.STDOUT, E.CHOSEN_UP): (S.STDOUT, A.NOTHING),
        (S.STDOUT, E.CHOSEN_DOWN): (S.STDOUT, A.USE_CHOSEN_DATABASE),
        (S.BESIDE, E.DATABASE_UP): (S.BESIDE, A.NOTHING),
        (S.BESIDE, E.DATABASE_DOWN): (S.PREFERRED, A.AWAIT_PREFERRED),
        # The preferred source: up beside the database, or alone when the database is not.
        (S.BESIDE, E.PREFERRED_UP): (S.PREFERRED, A.USE_PREFERRED),
        (S.BESIDE, E.PREFERRED_DOWN): (S.DATABASE, A.DROP_PREFERRED),
        (S.PREFERRED, E.PREFERRED_UP): (S.PREFERRED, A.USE_PREFERRED),
        (S.PREFERRED, E.PREFERRED_DOWN): (S.PREFERRED, A.TAKE_STDOUT),
        # A source failing while agy runs: the database, else agy's stdout, once; then nothing.
        (S.DIRECT, E.FAILED): (S.DIRECT, A.TAKE_STDOUT),
        (S.ALONE, E.FAILED): (S.ALONE, A.TAKE_STDOUT),
        (S.BESIDE, E.FAILED): (S.BESIDE, A.RAISE),
        (S.PREFERRED, E.FAILED): (S.PREFERRED, A.FALL_BACK),
        (S.DATABASE, E.FAILED): (S.DATABASE, A.TAKE_STDOUT),
        (S.STDOUT, E.FAILED): (S.STDOUT, A.FALL_BACK),
        (S.LAST, E.FAILED): (S.LAST, A.RAISE),
        (S.PREFERRED, E.DATABASE_UP): (S.DATABASE, A.USE_DATABASE),
        (S.PREFERRED, E.DATABASE_DOWN): (S.PREFERRED, A.TAKE_STDOUT),
        (S.STDOUT, E.DATABASE_UP): (S.LAST, A.USE_DATABASE),
        (S.STDOUT, E.DATABASE_DOWN): (S.STDOUT, A.RAISE),
        (S.DIRECT, E.STDOUT_UP): (S.STDOUT, A.USE_STDOUT),
        (S.ALONE, E.STDOUT_UP): (S.STDOUT, A.USE_STDOUT),
        (S.PREFERRED, E.STDOUT_UP): (S.STDOUT, A.USE_STDOUT),
        (S.DATABASE, E.STDOUT_UP): (S.STDOUT, A.USE_STDOUT),
        (S.DIRECT, E.STDOUT_DOWN): (S.DIRECT, A.RAISE),
        (S.ALONE, E.STDOUT_DOWN): (S.ALONE, A.RAISE),
        (S.PREFERRED, E.STDOUT_DOWN): (S.PREFERRED, A.RAISE),
        (S.DATABASE, E.STDOUT_DOWN): (S.DATABASE, A.RAISE),
        # The final drain: a stream's rest, then the database — the ground truth — until quiet;
        # agy's stdout, read to its end, has the turn's last word itself.
        (S.PREFERRED, E.REST_TAKEN): (S.DATABASE, A.RETIRE_AND_DRAIN),
        (S.STDOUT, E.REST_TAKEN): (S.LAST, A.RETIRE_AND_DRAIN),
        (S.STDOUT, E.STDOUT_ENDED): (S.STDOUT, A.NOTHING),
        (S.STDOUT, E.DRAIN): (S.STDOUT, A.TAKE_STDOUT_REST),
    }
    for state in _READING_DATABASE:
        table[state, E.DRAIN] = (state, A.DRAIN_DATABASE)
        # agy gone or not: the database reader failing is the same failure.
        table[state, E.FAILED_AFTER_EXIT] = table[state, E.FAILED]
    for state in _STREAMING:
        if state is not S.STDOUT:
            table[state, E.DRAIN] = (state, A.TAKE_REST)
        table[state, E.REST_ONLY] = (state, A.NOTHING)
        # agy exiting takes a stream's server along: the drain reads the database.
        table[state, E.FAILED_AFTER_EXIT] = (state, A.KEEP)
    for state in S:
        table[state, E.CLOSE] = (S.CLOSED, A.CLOSE_ALL)  # a second close finishes the first
    return table


TRANSITIONS: Mapping[tuple[HandoverState, Event], tuple[HandoverState, Action]] = _table()


def database_source(specs: Mapping[str, EventSourceSpec]) -> str | None:
    """The name of the registered source that reads agy's database (None: none does)."""
    return next((name for name, spec in specs.items() if spec.database), None)


def stdout_source(specs: Mapping[str, EventSourceSpec]) -> str | None:
    """The name of the registered source that reads agy's stdout (None: none does)."""
    return next((name for name, spec in specs.items() if spec.stdout), None)


class SourceHandover:
    """The sources of one turn and the one it reads now (`source`, named `name`).

    `specs` are the registered sources, `database` the name of the one that reads agy's database
    (the ground truth every other source falls back to; None when none is registered). The
    source that reads agy's stdout (`EventSourceSpec.stdout`), when one is registered, serves
    the turn when it is chosen, and once when neither the database nor the chosen source can
    be read. The turn's context says which source it reads (`turn.source`), kept up to date on
    every move.
    """

    def __init__(
        self, specs: Mapping[str, EventSourceSpec], turn: TurnContext, *, database: str | None
    ) -> None:
        self.specs = specs
        self.turn = turn
        self.database = database
        self.stdout = stdout_source(specs)
        self.state = HandoverState.OPENING
        self.source: EventSource | None = None
        self.name = ""
        self._chosen = ""
        self._backup: EventSource | None = None  # the database reader, opened once and shared
        self._retired: list[EventSource] = []  # sources the turn moved away from, still open
        # The preferred source while it opens beside the database: (name, source, its open()).
        self._upgrade: tuple[str, EventSource, asyncio.Future[None]] | None = None
        self._opened: EventSource | None = None  # what the last opening action opened
        self._fallbacks = 0  # sources that could not start or failed (`fallbacks`)
        self._feed: Feed | None = None  # while the drain runs: where its steps go

    def fire(self, event: Event) -> Action:
        """The one place the state moves: the table's answer to `event` in this state."""
        try:
            self.state, action = TRANSITIONS[self.state, event]
        except KeyError:
            raise HandoverError(
                f"the source handover has no move for event {event.name} in state {self.state.name}"
            ) from None
        return action

    async def _run(self, event: Event, cause: AgyError | None = None) -> Action:
        """Fire `event`, then each event its action leads to; the last action taken."""
        while True:
            action = self.fire(event)
            following = await self._act(action, cause)
            if following is None:
                return action
            event, failure = following
            cause = failure or cause  # a failure that leads to nothing raises the first one

    @property
    def fallbacks(self) -> int:
        """How often the turn fell back from a source that could not start or failed to the
        database or agy's stdout (`TurnFacts.source_fallbacks`); asked at the turn's end, a
        preferred source still opening never served it, and counts too."""
        return self._fallbacks + (self._upgrade is not None)

    @property
    def reads_database(self) -> bool:
        return self.name == self.database

    @property
    def upgrading(self) -> asyncio.Future[None] | None:
        """The preferred source's `open()` while it runs beside the database (None otherwise)."""
        return self._upgrade[2] if self._upgrade is not None else None

    # -- what the driver calls: each turns what happened into an event ---------------------------

    async def open(self, name: str) -> None:
        """Open the chosen source. A source other than the database (rpc) is opened beside it:
        the database streams from the first instant, and the turn moves to the other source
        once it is up (`take_upgrade`). If it never comes up the database finishes the turn.
        The stdout source reads alone (it needs nothing else); if it cannot read this turn (agy
        printed no stream-json), the database does. When neither the database nor the chosen
        source opens, agy's stdout is the last resort."""
        self.name = self.turn.source = self._chosen = name  # what the turn says, even if it fails
        if name == self.database:
            event = E.CHOSE_DATABASE
        elif self.specs[name].stdout:
            event = E.CHOSE_STDOUT
        elif self.database is None:
            event = E.CHOSE_ALONE
        else:
            event = E.CHOSE_PREFERRED
        await self._run(event)

    async def take_upgrade(self, *, finished: bool) -> None:
        """Move to the preferred source once it opened; log and stay on the database if not.

        `finished`: agy already exited (a quick turn can end before its server is found)."""
        assert self._upgrade is not None
        name, _source, opening = self._upgrade
        try:
            opening.result()
        except (AgyError, asyncio.CancelledError) as exc:
            log.log(
                logging.INFO if finished else logging.WARNING,
                "the %s event source could not start (%s); reading the database",
                name,
                exc,
            )
            await self._run(E.PREFERRED_DOWN)
            return
        except BaseException:
            await self._drop_upgrade()
            raise
        await self._run(E.PREFERRED_UP)

    async def poll(self, process: TurnProcess) -> list[Step]:
        """The source's changes; a failing source is replaced as the table says, and the new
        one read at once."""
        while True:
            assert self.source is not None
            try:
                return await self.source.poll()
            except AgyError as exc:
                # agy exiting takes its server along; the exit may not be reaped yet, so look.
                exited = await process.wait(_EXIT_GRACE) is not None
                event = E.FAILED_AFTER_EXIT if exited else E.FAILED
                if await self._run(event, exc) is A.KEEP:
                    return []  # the drain reads the database

    async def drain(self, feed: Feed) -> None:
        """Take what the source still holds, then read the database until it is quiet.

        After agy exits its language server is gone with it, so the database — the ground truth —
        gives the last word; the assembler (behind `feed`) drops whatever was already streamed.
        """
        assert self.source is not None
        self._feed = feed
        try:
            await self._run(E.DRAIN)
        finally:
            self._feed = None

    async def aclose(self) -> None:
        """Close every source the turn opened; a second call (after a cancellation) finishes."""
        await self._run(E.CLOSE)

    # -- the actions ---------------------------------------------------------------------------

    async def _act(
        self, action: Action, cause: AgyError | None
    ) -> tuple[Event, AgyError | None] | None:
        """Do `action`; the event it leads to (with the failure, if any), or None."""
        if action is A.OPEN_CHOSEN:
            return await self._open_chosen()
        if action is A.OPEN_BESIDE:
            return await self._open_beside()
        if action is A.AWAIT_PREFERRED:
            return await self._await_preferred()
        if action in (A.USE_CHOSEN_DATABASE, A.FALL_BACK) and self.database is None:
            return E.DATABASE_DOWN, None  # nothing to fall back to: the failure is the turn's
        if action is A.USE_CHOSEN_DATABASE:
            log.warning(
                "the %s event source cannot read this turn (%s); reading the database",
                self._chosen,
                cause,
            )
            self._fallbacks += 1
            return await self._open_database()
        if action is A.FALL_BACK:
            log.warning(
                "the %s event source failed (%s); finishing from the database", self.name, cause
            )
            self._fallbacks += 1
            return await self._open_database()
        if action is A.TAKE_STDOUT:
            return await self._open_stdout()
        if action is A.USE_DATABASE:
            old = self.source
            self._read(self._backup)
            if old is not None:
                await old.aclose()
            return None
        if action is A.USE_PREFERRED:
            assert self._upgrade is not None
            name, source, _opening = self._upgrade
            self._upgrade = None
            self._read(source, name)
            return None
        if action is A.USE_STDOUT:
            log.warning(
                "%s; reading agy's stdout instead (%s: no thinking text)", cause, self.stdout
            )
            self._fallbacks += 1
            if self.source is not None:
                self._retired.append(self.source)
            self._read(self._opened, self.stdout)
            return None
        if action is A.DROP_PREFERRED:
            self._fallbacks += 1
            await self._drop_upgrade()
            return None
        if action is A.RAISE:
            assert cause is not None
            raise cause
        if action is A.TAKE_REST:
            return await self._take_rest(complete=False)
        if action is A.TAKE_STDOUT_REST:
            return await self._take_rest(complete=True)
        if action is A.RETIRE_AND_DRAIN:
            if self.source is not None:
                self._retired.append(self.source)  # closed after the final event
            self._read(self._backup)
            await self._drain_database()
            return None
        if action is A.DRAIN_DATABASE:
            await self._drain_database()
            return None
        if action is A.CLOSE_ALL:
            await self._close_all()
        return None  # NOTHING, KEEP

    def _read(self, source: EventSource | None, name: str | None = None) -> None:
        """The turn reads `source` (named `name`; the database when None) from now on."""
        self.source = source
        self.name = self.turn.source = name if name is not None else (self.database or "")

    async def _open(self, name: str) -> EventSource:
        source: EventSource = self.specs[name].factory(self.turn)
        try:
            await source.open()
        except BaseException:
            await source.aclose()
            raise
        return source

    async def _open_chosen(self) -> tuple[Event, AgyError | None]:
        try:
            source = await self._open(self._chosen)
        except AgyError as exc:
            return E.CHOSEN_DOWN, exc
        self._read(source, self._chosen)
        return E.CHOSEN_UP, None

    async def _open_database(self) -> tuple[Event, AgyError | None]:
        """The database reader of the bound database, opened once and shared."""
        if self._backup is None:
            if self.database is None:
                return E.DATABASE_DOWN, SourceError("no event source reads agy's database")
            try:
                self._backup = await self._open(self.database)
            except AgyError as exc:
                return E.DATABASE_DOWN, exc
        return E.DATABASE_UP, None

    async def _open_stdout(self) -> tuple[Event, AgyError | None]:
        """The last resort: agy's stdout, since nothing else reads (into `_opened`)."""
        if self.stdout is None:
            return E.STDOUT_DOWN, None
        try:
            self._opened = await self._open(self.stdout)
        except AgyError as exc:
            log.info("agy's stdout cannot be read either (%s)", exc)
            return E.STDOUT_DOWN, None
        return E.STDOUT_UP, None

    async def _open_beside(self) -> tuple[Event, AgyError | None]:
        source: EventSource = self.specs[self._chosen].factory(self.turn)
        opening = asyncio.ensure_future(source.open())
        self._upgrade = (self._chosen, source, opening)
        try:
            event, failure = await self._open_database()
        except BaseException:
            await self._drop_upgrade()
            raise
        if event is E.DATABASE_UP:
            self._read(self._backup)
        else:
            log.info(
                "the database cannot be read yet (%s); waiting for the %s source",
                failure,
                self._chosen,
            )
        return event, failure

    async def _await_preferred(self) -> tuple[Event, AgyError | None]:
        assert self._upgrade is not None
        _name, source, opening = self._upgrade
        try:
            await opening
        except AgyError as exc:
            self._upgrade = None
            await source.aclose()
            return E.PREFERRED_DOWN, exc
        except BaseException:
            await self._drop_upgrade()
            raise
        return E.PREFERRED_UP, None

    async def _drop_upgrade(self) -> None:
        """The preferred source opening beside the database will not serve: closed."""
        if self._upgrade is None:
            return
        _name, source, opening = self._upgrade
        self._upgrade = None
        opening.cancel()
        with contextlib.suppress(BaseException):
            await opening
        await source.aclose()

    async def _take_rest(self, *, complete: bool) -> tuple[Event, AgyError | None]:
        """What the stream delivered before agy exited; its server went with it, so a failure
        to reach it now is expected and the database has the rest. `complete`: agy's stdout,
        read until it says whether that was the whole turn."""
        assert self.source is not None and self._feed is not None
        try:
            changed = await self.source.poll(force=True)
            await self._feed(changed)
            while complete and changed:
                changed = await self.source.poll(force=True)
                await self._feed(changed)
        except AgyError:
            complete = False
        if complete:
            return E.STDOUT_ENDED, None
        event, failure = await self._open_database()
        if event is E.DATABASE_DOWN:
            log.warning("could not read the database for the final drain: %s", failure)
            return E.REST_ONLY, None
        return E.REST_TAKEN, None

    async def _drain_database(self) -> None:
        assert self.source is not None and self._feed is not None
        quiet = 0
        while quiet < _DRAIN_QUIET_POLLS:
            try:
                changed = await self.source.poll(force=quiet == 0)
            except AgyError as exc:
                log.warning("last read failed: %s", exc)
                return
            if changed:
                await self._feed(changed)
                quiet = 0
            else:
                quiet += 1

    async def _close_all(self) -> None:
        if self._upgrade is not None:  # the preferred source never got its turn
            _name, pending, opening = self._upgrade
            self._upgrade = None
            self._retired.append(pending)  # closed below, by a second run of this step too
            opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
        sources = [self.source, self._backup, self._opened, *self._retired]
        for source in {id(s): s for s in sources if s is not None}.values():
            with contextlib.suppress(AgyError):
                await source.aclose()
