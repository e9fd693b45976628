"""The source handover of one turn: which event source it reads, and every legal move between
them (a preferred source opened beside the database, moving to it, falling back to the database
or, when neither it nor the preferred source can be read, to agy's stdout) in one table.
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

__all__ = ["TRANSITIONS", "HandoverState", "SourceHandover", "database_source", "stdout_source"]

log = logging.getLogger(__name__)

# After agy exits, keep reading until the database stops changing for this many polls.
_DRAIN_QUIET_POLLS = 3
# When the server stops answering, how long to wait for agy's exit to explain it.
_EXIT_GRACE = 1.0


class HandoverState(enum.Enum):
    """Where a turn's events come from."""

    OPENING = "opening"  # nothing reads yet
    DIRECT = "direct"  # the chosen source alone: it is the database, or nothing to fall back to
    BESIDE = "beside"  # the database reads while the preferred source opens beside it
    PREFERRED = "preferred"  # the preferred source reads; the database is the fallback
    DATABASE = "database"  # fell back (or drained after agy exited): the database finishes
    STDOUT = "stdout"  # neither the database nor the preferred source reads: agy's stdout does
    CLOSED = "closed"


S = HandoverState
# The legal moves. DIRECT moves to the database for the final drain of a source that is not
# the database (nor stdout, which has its own last word), or when it fails; a turn in BESIDE
# drains the database it already reads. STDOUT is the last resort, taken once per turn: the
# database cannot be read and the preferred source is not up (or failed).
TRANSITIONS: Mapping[HandoverState, frozenset[HandoverState]] = {
    S.OPENING: frozenset({S.DIRECT, S.BESIDE, S.PREFERRED, S.STDOUT, S.CLOSED}),
    S.DIRECT: frozenset({S.DATABASE, S.STDOUT, S.CLOSED}),
    S.BESIDE: frozenset({S.PREFERRED, S.DATABASE, S.CLOSED}),
    S.PREFERRED: frozenset({S.DATABASE, S.STDOUT, S.CLOSED}),
    S.DATABASE: frozenset({S.STDOUT, S.CLOSED}),
    S.STDOUT: frozenset({S.DATABASE, S.CLOSED}),
    S.CLOSED: frozenset({S.CLOSED}),
}


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
        self._stdout_tried = False  # the last resort is tried once per turn
        self.state = HandoverState.OPENING
        self.source: EventSource | None = None
        self.name = ""
        self._backup: EventSource | None = None  # the database reader, opened once and shared
        self._retired: list[EventSource] = []  # sources the turn moved away from, still open
        # The preferred source still opening beside the database: (name, source, its open()).
        self._upgrade: tuple[str, EventSource, asyncio.Future[None]] | None = None
        self._fallbacks = 0  # sources that could not start or failed (`fallbacks`)

    def _move(self, state: HandoverState, source: EventSource | None, name: str) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"source handover cannot move from {self.state} to {state}")
        self.state, self.source, self.name = state, source, name
        self.turn.source = name

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
    def _database_name(self) -> str:
        assert self.database is not None  # asked only once the database reader is open
        return self.database

    @property
    def upgrading(self) -> asyncio.Future[None] | None:
        """The preferred source's `open()` while it runs beside the database (None otherwise)."""
        return self._upgrade[2] if self._upgrade is not None else None

    async def open(self, name: str) -> None:
        """Open the chosen source. A source other than the database (rpc) is opened beside it:
        the database streams from the first instant, and the turn moves to the other source
        once it is up (`take_upgrade`). If it never comes up the database finishes the turn.
        The stdout source reads alone (it needs nothing else); if it cannot read this turn (agy
        printed no stream-json), the database does. When neither the database nor the chosen
        source opens, agy's stdout is the last resort."""
        self.name = self.turn.source = name  # what the turn says it uses, even if this fails
        self._stdout_tried = self.specs[name].stdout
        if self.specs[name].stdout and name != self.database and self.database in self.specs:
            try:
                await self._open_direct(name)
            except AgyError as exc:
                log.warning(
                    "the %s event source cannot read this turn (%s); reading the database",
                    name,
                    exc,
                )
                self._fallbacks += 1
                self.name = self.turn.source = self._database_name
                await self._open_direct(self._database_name)
            return
        if name == self.database or self.database not in self.specs:
            try:
                await self._open_direct(name)
            except AgyError as exc:
                if not await self._open_stdout(exc):
                    raise
            return
        source: EventSource = self.specs[name].factory(self.turn)
        opening = asyncio.ensure_future(source.open())
        try:
            backup = await self._open_backup()
        except AgyError as exc:
            log.info("the database cannot be read yet (%s); waiting for the %s source", exc, name)
            try:
                await opening
            except AgyError as failure:
                await source.aclose()
                if not await self._open_stdout(failure):
                    raise
                return
            except BaseException:
                await source.aclose()
                raise
            self._move(S.PREFERRED, source, name)
            return
        except BaseException:
            opening.cancel()
            await source.aclose()
            raise
        self._move(S.BESIDE, backup, self._database_name)
        self._upgrade = (name, source, opening)

    async def _open_direct(self, name: str) -> None:
        source: EventSource = self.specs[name].factory(self.turn)
        try:
            await source.open()
        except BaseException:
            await source.aclose()
            raise
        self._move(S.DIRECT, source, name)

    async def _open_stdout(self, why: AgyError) -> bool:
        """The last resort, once per turn: read agy's stdout, since `why` left nothing else.
        False when no stdout source is registered, it was tried already, or it cannot read."""
        name = self.stdout
        if name is None or self._stdout_tried:
            return False
        self._stdout_tried = True
        source: EventSource = self.specs[name].factory(self.turn)
        try:
            await source.open()
        except AgyError as exc:
            await source.aclose()
            log.info("agy's stdout cannot be read either (%s)", exc)
            return False
        except BaseException:
            await source.aclose()
            raise
        log.warning("%s; reading agy's stdout instead (%s: no thinking text)", why, name)
        self._fallbacks += 1
        if self.source is not None:
            self._retired.append(self.source)
        self._move(S.STDOUT, source, name)
        return True

    async def take_upgrade(self, *, finished: bool) -> None:
        """Move to the preferred source once it opened; log and stay on the database if not.

        `finished`: agy already exited (a quick turn can end before its server is found)."""
        assert self._upgrade is not None
        name, source, opening = self._upgrade
        self._upgrade = None
        try:
            opening.result()
        except (AgyError, asyncio.CancelledError) as exc:
            await source.aclose()
            log.log(
                logging.INFO if finished else logging.WARNING,
                "the %s event source could not start (%s); reading the database",
                name,
                exc,
            )
            self._fallbacks += 1
            self._move(S.DATABASE, self.source, self.name)
            return
        except BaseException:
            await source.aclose()
            raise
        self._move(S.PREFERRED, source, name)

    async def _open_backup(self) -> EventSource:
        """The database reader of the bound database, opened once and shared."""
        if self._backup is None:
            if self.database is None:
                raise SourceError("no event source reads agy's database")
            backup: EventSource = self.specs[self.database].factory(self.turn)
            try:
                await backup.open()
            except BaseException:
                await backup.aclose()
                raise
            self._backup = backup
        return self._backup

    async def poll(self, process: TurnProcess) -> list[Step]:
        """The source's changes; a failing source other than the database is replaced by it."""
        assert self.source is not None
        try:
            return await self.source.poll()
        except AgyError as exc:
            # agy exiting takes its server along; the exit may not be reaped yet, so look.
            exited = await process.wait(_EXIT_GRACE) is not None
            if exited and not self.reads_database:
                return []  # the drain reads the database
            if self.reads_database or self.database not in self.specs:
                if await self._open_stdout(exc):
                    return await self.poll(process)
                raise
            log.warning(
                "the %s event source failed (%s); finishing from the database", self.name, exc
            )
            self._fallbacks += 1
        old = self.source
        try:
            backup = await self._open_backup()
        except AgyError as exc:
            if not await self._open_stdout(exc):
                raise
            return await self.poll(process)
        self._move(S.DATABASE, backup, self._database_name)
        await old.aclose()
        return await self.poll(process)

    async def drain(self, feed: Callable[[list[Step]], Awaitable[None]]) -> None:
        """Take what the source still holds, then read the database until it is quiet.

        After agy exits its language server is gone with it, so the database — the ground truth —
        gives the last word; the assembler (behind `feed`) drops whatever was already streamed.
        """
        assert self.source is not None
        if not self.reads_database:
            # What the stream delivered before agy exited; its server went with it, so a
            # failure to reach it now is expected and the database below has the rest. agy's
            # stdout, read to its end by now, has the turn's last word itself.
            complete = self.specs[self.name].stdout
            try:
                changed = await self.source.poll(force=True)
                await feed(changed)
                while complete and changed:  # until it says whether that was the whole turn
                    changed = await self.source.poll(force=True)
                    await feed(changed)
            except AgyError:
                complete = False
            if complete:
                return
            try:
                backup = await self._open_backup()
            except AgyError as exc:
                log.warning("could not read the database for the final drain: %s", exc)
                return
            self._retired.append(self.source)  # closed after the final event
            self._move(S.DATABASE, backup, self._database_name)
        quiet = 0
        while quiet < _DRAIN_QUIET_POLLS:
            try:
                changed = await self.source.poll(force=quiet == 0)
            except AgyError as exc:
                log.warning("last read failed: %s", exc)
                return
            if changed:
                await feed(changed)
                quiet = 0
            else:
                quiet += 1

    async def aclose(self) -> None:
        """Close every source the turn opened; a second call (after a cancellation) finishes."""
        if self._upgrade is not None:  # the preferred source never got its turn
            _name, pending, opening = self._upgrade
            self._upgrade = None
            self._retired.append(pending)  # closed below, by a second run of this step too
            opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
        sources = [self.source, self._backup, *self._retired]
        for source in {id(s): s for s in sources if s is not None}.values():
            with contextlib.suppress(AgyError):
                await source.aclose()
        if self.state is not S.CLOSED:
            self.state = S.CLOSED
