"""The warm pool: which agy a turn gets (`warm_key`, `WarmPool.lease`: one per conversation and
settings, spares ahead), the bound, the reaper; the one owner of its lock, where agys' events fire.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

from agy_provider.agy.argv import TurnRequest
from agy_provider.agy.argv import build_warm_argv
from agy_provider.agy.database import newest_step_index
from agy_provider.errors import AgyError
from agy_provider.live.admission import COLD_STARTS
from agy_provider.live.admission import Ticket
from agy_provider.live.admission import TurnAdmission
from agy_provider.live.discovery import conversations_dir
from agy_provider.live.warm.agy import IDLE
from agy_provider.live.warm.agy import KILL_AFTER
from agy_provider.live.warm.agy import READ_AFTER_EXIT
from agy_provider.live.warm.agy import SPARES
from agy_provider.live.warm.agy import TRANSITIONS
from agy_provider.live.warm.agy import WarmAction
from agy_provider.live.warm.agy import WarmAgy
from agy_provider.live.warm.agy import WarmEvent
from agy_provider.live.warm.agy import WarmState
from agy_provider.live.warm.agy import WarmStateError
from agy_provider.live.warm.agy import WarmTurnSink
from agy_provider.live.warm.agy import transition
from agy_provider.live.warm.registry import REGISTRY

__all__ = [
    "POOL",
    "START_FAILED_FOR",
    "TRANSITIONS",
    "WAIT_FOR_ADMISSION",
    "WarmAction",
    "WarmAgy",
    "WarmEvent",
    "WarmPool",
    "WarmSettings",
    "WarmState",
    "WarmStateError",
    "WarmTurnSink",
    "moved_on",
    "newest_index",
    "warm_key",
]

log = logging.getLogger(__name__)

# How long a conversation's next turn waits for the previous turn to let go of its agy (that turn
# delivered its final event; its cleanup is a few milliseconds behind).
_LET_GO = 10.0
# How long a binary whose warm agy did not start within the start deadline runs each turn as
# `agy -p` instead (a sign-in prompt or a broken install is not fixed in seconds; an overloaded
# machine may be calmer by then, and the warm pool is tried again).
START_FAILED_FOR = 600.0


class _WaitForAdmission:
    """`lease`'s answer when the turn's agy must start and no cold start slot is free: the turn
    waits its turn in the queue (`live/admission.py`) on its loop, then leases again."""

    def __repr__(self) -> str:
        return "WAIT_FOR_ADMISSION"


WAIT_FOR_ADMISSION = _WaitForAdmission()


@dataclasses.dataclass(frozen=True, slots=True)
class WarmSettings:
    """The pool's bounds (config `warm_max`, `warm_idle_timeout`, `warm_spares`)."""

    max: int = 4
    idle_timeout: float = 600.0
    spares: int = 1


def warm_key(request: TurnRequest, environ: Mapping[str, str] | None = None) -> str:
    """The settings a warm agy was started with, as one value: the binary (by identity), its
    flags but the conversation, log file and token, the folder and the environment. Any change
    means another process (agy has no in-band change of model, mode, permissions, §2.4)."""
    identity = binary_identity(request.agy_bin)
    flags = build_warm_argv(
        dataclasses.replace(request, conversation_id="", log_file="", csrf_token="")
    )[1:]
    env = {**(os.environ if environ is None else environ), **request.env}
    digest = hashlib.sha256()
    for part in (identity, "\0".join(flags), os.path.abspath(request.cwd), request.mcp_tools):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\x01")
    for name in sorted(env):
        digest.update(f"{name}={env[name]}".encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()[:32]


def binary_identity(path: str) -> str:
    """The file `path` runs (through any symlink), as one `stat` tells it: its device, inode,
    size and modification time (a binary replaced or updated in place is another)."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.abspath(path)
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def newest_index(agy: WarmAgy) -> int | None:
    """The newest step index of `agy`'s conversation database (-1: none yet), read-only through
    `agy/database.py`; None when it cannot be read (blocking: off the loop)."""
    if not agy.conversation_id:
        return None
    state = agy.template.env.get("ANTIGRAVITY_APP_DATA_DIR", "")
    path = conversations_dir(state) / f"{agy.conversation_id}.db"
    try:
        return newest_step_index(path) if path.is_file() else -1
    except (AgyError, OSError) as exc:
        log.debug("warm agy %d: its conversation's newest step is unknown: %s", agy.pid, exc)
        return None


def moved_on(seen: int | None, newest: int | None) -> bool:
    """Whether an idle agy's conversation moved on since its last turn: it ended at step `seen`
    and the database now ends at `newest`. Anything but the same known index is not proof that
    agy saw all of it (another host's turn, a one-shot turn, a database rewritten), and agy,
    which keeps its conversation in memory, would write over steps it never saw."""
    return seen is None or newest is None or newest != seen


class WarmPool:
    """Every warm agy of this host process, bounded; thread-safe (turns run on many loops).

    The pool owns its lock: every agy's state moves in `fire` under it (the agys' own threads
    fire through it too), and whatever waits for an agy to move waits on its condition."""

    def __init__(self) -> None:
        self.settings = WarmSettings()
        # Re-entrant: `fire` takes it, also from the pool's own methods that already hold it.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # an agy moved
        self._agys: list[WarmAgy] = []
        self._refused: set[str] = set()  # binaries (by identity) that refused stream-json input
        # Binaries (by identity) whose warm agy did not start in time -> until when (monotonic)
        # their turns run `agy -p` (`start_failed`).
        self._failed_start: dict[str, float] = {}
        self._reaper: threading.Thread | None = None
        self._wake = threading.Event()
        self._closed = False

    def configure(self, settings: WarmSettings) -> None:
        """The bounds in force from now on (each turn's settings; the newest wins)."""
        if settings != self.settings:
            self.settings = settings
            self._wake.set()

    def fire(self, agy: WarmAgy, event: WarmEvent) -> WarmAction:
        """The one place a warm agy's state moves: the table's answer to `event` in its state
        (`WarmStateError` naming both if it has none), the pool's part of the action done; the
        action, for the caller to act on (END: end its process, outside the lock)."""
        with self._lock:
            agy.state, action = transition(agy.state, event)
            if action is WarmAction.STARTED:
                self._release_ticket(agy)
                REGISTRY.changed(agy)
            elif action is WarmAction.TAKEN:
                REGISTRY.changed(agy)
            elif action is WarmAction.IDLE:
                agy.turns += 1
                agy.last_used = time.monotonic()
                REGISTRY.changed(agy)
            elif action is WarmAction.FORGET:
                self._release_ticket(agy)
                with contextlib.suppress(ValueError):
                    self._agys.remove(agy)
                REGISTRY.changed(agy, gone=True)
                log.debug("warm agy %d ended (code %s)", agy.pid, agy.exit_code)
            self._changed.notify_all()
            return action

    def wait_closed(self, agy: WarmAgy, timeout: float | None) -> bool:
        """Until `agy` is CLOSED (its exit handled), at most `timeout` seconds; whether it is."""
        with self._changed:
            return self._changed.wait_for(lambda: agy.state is WarmState.CLOSED, timeout)

    @staticmethod
    def _release_ticket(agy: WarmAgy) -> None:
        ticket, agy.ticket = agy.ticket, None
        if ticket is not None:
            ticket.release()

    def agys(self) -> list[WarmAgy]:
        """The live warm agys (a copy)."""
        with self._lock:
            return [a for a in self._agys if a.state is not WarmState.CLOSED]

    def refuses(self, request: TurnRequest) -> bool:
        """Whether `request`'s turn runs `agy -p`: its binary refused to stay, or its warm agy
        did not start within the start deadline lately (`start_failed`)."""
        binary = binary_identity(request.agy_bin)
        until = self._failed_start.get(binary)
        if until is not None and time.monotonic() >= until:
            self._failed_start.pop(binary, None)
            until = None
        return binary in self._refused or until is not None

    def start_failed(self, request: TurnRequest, timeout: float, said: str) -> None:
        """`request`'s warm agy did not start its turn within `timeout` seconds (the start
        deadline): each turn of that binary runs `agy -p` for `START_FAILED_FOR` seconds, so no
        turn waits for a warm start again meanwhile."""
        binary = binary_identity(request.agy_bin)
        if binary not in self._failed_start:
            log.warning(
                "%s did not start within %gs (start_timeout) as one process for many turns%s; "
                "its turns run agy -p for the next %.0f minutes. Run `agy-provider doctor` to "
                "check agy's install and sign-in",
                request.agy_bin,
                timeout,
                f" (it said: {said.strip()[-300:]})" if said.strip() else "",
                START_FAILED_FOR / 60,
            )
        self._failed_start[binary] = time.monotonic() + START_FAILED_FOR

    def refused(self, request: TurnRequest, why: str) -> None:
        """agy would not run as one process for many turns: each turn runs `agy -p` from now on."""
        binary = binary_identity(request.agy_bin)
        if binary not in self._refused:
            self._refused.add(binary)
            log.warning(
                "%s does not run as one process for many turns (--input-format stream-json): %s; "
                "each turn starts its own agy -p (slower: agy's cold start every turn)",
                request.agy_bin,
                why.strip() or "it exited at once",
            )

    def forget_failed_starts(self) -> None:
        """Every binary may try a warm start again (a test or benchmark starting afresh)."""
        self._failed_start.clear()

    def lease(
        self,
        request: TurnRequest,
        offered: Sequence[object] = (),
        admission: TurnAdmission | None = None,
    ) -> WarmAgy | _WaitForAdmission | None:
        """A warm agy for `request`'s turn, moved to IN_TURN (blocking: it may fork; off the
        loop): the conversation's own, a spare of the same settings for a new conversation, else
        a new one (serving `offered`, the turn's host tools, from a bridge of its own). None when
        the bound is reached by agys all in turns (the turn runs `-p`). With `admission`, a new
        one starts only on a cold start slot (the turn's, or a free one), else
        `WAIT_FOR_ADMISSION`."""
        key = warm_key(request)
        while True:
            retired: list[WarmAgy] = []
            try:
                with self._lock:
                    if self._closed:
                        return None
                    self._let_go_of(request.conversation_id)
                    found = self._find(key, request.conversation_id, retired)
                    if found is not None:
                        self.fire(found, WarmEvent.LEASED)
                        return found
                    if not retired:
                        return self._start_for(key, request, offered, retired, admission)
            finally:
                for old in retired:
                    old.end(interrupt=False, grace=KILL_AFTER)
            # The conversation's agy of other settings is ended now: only then may another
            # start on the conversation (two would be two writers of its database).

    def _start_for(
        self,
        key: str,
        request: TurnRequest,
        offered: Sequence[object],
        retired: list[WarmAgy],
        admission: TurnAdmission | None = None,
    ) -> WarmAgy | _WaitForAdmission | None:
        """A new agy, in `request`'s turn, after making room (lock held; the agys it retires
        join `retired`, for the caller to end); None when every agy is in a turn (the turn's
        slot, if any, stays with it for its `agy -p`)."""
        if admission is not None and not admission.take_now():
            return WAIT_FOR_ADMISSION
        if not self._make_room(retired):
            log.info(
                "all %d warm agy processes are in turns (warm_max); this turn runs its own agy -p",
                self.settings.max,
            )
            return None
        ticket = admission.hand_over() if admission is not None else None
        agy = self._add(key, request, offered=offered, ticket=ticket)
        self.fire(agy, WarmEvent.LEASED)
        return agy

    def stale(self, agy: WarmAgy) -> bool:
        """Whether leased `agy`, idle since an earlier turn, must not take this one: its
        conversation moved on since (`moved_on`; blocking, a read of agy's database)."""
        return agy.turns > 0 and moved_on(agy.seen_index, newest_index(agy))

    def lease_now(self, request: TurnRequest) -> WarmAgy | None:
        """`lease` without waiting, for the loop: the conversation's idle agy (or, for a new
        conversation, a spare) when the pool's lock is free and nothing needs waiting for,
        ending or starting; else None (then `lease`, off the loop, does the rest)."""
        key = warm_key(request)
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._closed:
                return None
            conversation = request.conversation_id
            if conversation and any(
                a.conversation_id == conversation
                and a.state in (WarmState.IN_TURN, WarmState.CLOSING)
                for a in self._agys
            ):
                return None  # its previous turn still lets go of it, or it is being ended
            for agy in self._agys:
                if agy.key == key and _answers(agy, conversation):
                    self.fire(agy, WarmEvent.LEASED)
                    return agy
            return None
        finally:
            self._lock.release()

    def _let_go_of(self, conversation_id: str) -> None:
        """Wait (lock held) while the conversation's agy is still held by its previous turn,
        which is letting go of it: its host already has the final event, the cleanup follows.
        One that is not let go in time is ended (its turn is stuck in its cleanup). An agy of
        the conversation being ended (the bound chose it, say) is waited for too: another agy
        on the conversation, warm or `agy -p`, would be a second writer of its database."""
        if not conversation_id:
            return
        deadline = time.monotonic() + _LET_GO
        while True:
            ours = [a for a in self._agys if a.conversation_id == conversation_id]
            held = [a for a in ours if a.state is WarmState.IN_TURN]
            ending = [a for a in ours if a.state is WarmState.CLOSING]
            left = deadline - time.monotonic()
            if not held and (not ending or left <= 0):
                return
            if left <= 0:
                for agy in held:
                    log.warning("warm agy %d was not let go by its turn; ending it", agy.pid)
                    if self.fire(agy, WarmEvent.RETIRED) is WarmAction.END:
                        threading.Thread(
                            target=agy.end, kwargs={"interrupt": True, "grace": 0.1}, daemon=True
                        ).start()
                return
            self._changed.wait(left)

    def _find(self, key: str, conversation_id: str, retired: list[WarmAgy]) -> WarmAgy | None:
        for agy in self._agys:
            if not _answers(agy, conversation_id):
                continue
            if agy.key == key:
                return agy
            if conversation_id:  # its settings changed: a new agy continues it
                self._retire(agy, retired)
        return None

    def _retire(self, agy: WarmAgy, retired: list[WarmAgy]) -> None:
        """End `agy`: it joins `retired`, for the caller to end outside the lock."""
        if self.fire(agy, WarmEvent.RETIRED) is WarmAction.END:
            retired.append(agy)

    def _make_room(self, retired: list[WarmAgy]) -> bool:
        """Below the bound, ending the least recently used idle agy if need be (lock held)."""
        live = [a for a in self._agys if a.state is not WarmState.CLOSING]
        if len(live) < self.settings.max:
            return True
        idle = [a for a in live if a.state in IDLE]
        if not idle:
            return False
        self._retire(min(idle, key=lambda a: a.last_used), retired)
        return True

    def _add(
        self,
        key: str,
        request: TurnRequest,
        *,
        offered: Sequence[object] = (),
        ticket: Ticket | None = None,
    ) -> WarmAgy:
        """A new agy, STARTING (a spare until a turn leases it), holding `ticket` (its cold start
        slot) until its `init` or its end (lock held)."""
        agy = WarmAgy(key, request, owner=self, offered=offered)
        agy.ticket = ticket
        try:
            agy.start()
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise
        self._agys.append(agy)
        REGISTRY.changed(agy)
        self._start_reaper()
        return agy

    def release(self, agy: WarmAgy, *, new_conversation: bool) -> None:
        """A turn ended with agy's `result` and agy lives: idle again. After a new conversation's
        first turn, a spare of the same settings is started for the next (blocking: off the loop)."""
        with self._lock:
            if self.fire(agy, WarmEvent.RELEASED) is not WarmAction.IDLE:
                return  # it is being ended, or gone
            if not new_conversation or self.settings.spares <= 0 or self._closed:
                return
            spares = [a for a in self._agys if a.state in SPARES]
            if any(a.key == agy.key for a in spares):
                return
            # A spare starts only on a free cold start slot: turns waiting for one come first.
            ticket = COLD_STARTS.try_admit()
            if ticket is None:
                log.debug("no spare agy started: agys are starting for turns (cold_starts)")
                return
            retired: list[WarmAgy] = []
            if len(spares) >= self.settings.spares:
                self._retire(min(spares, key=lambda a: a.last_used), retired)
            elif not self._make_room(retired):
                ticket.release()
                return
            try:
                spare = _spare_request(agy.template)
                self._add(agy.key, spare, offered=agy.offered, ticket=ticket)
            except OSError as exc:  # its slot went back in `_add`
                log.info("could not start a spare agy: %s", exc)
        for old in retired:
            old.end(interrupt=False, grace=KILL_AFTER)

    def discard(self, agy: WarmAgy, *, interrupt: bool, grace: float) -> None:
        """End `agy` (an abort, a deadline, a turn that did not finish; blocking): also when it
        was being ended already, until it is gone."""
        self.fire(agy, WarmEvent.RETIRED)
        agy.end(interrupt=interrupt, grace=grace)

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="agy-provider-warm-reaper")
            self._reaper.daemon = True
            self._reaper.start()
            atexit.register(self.shutdown)

    def _reap(self) -> None:
        """Ends agys idle longer than `idle_timeout` (spares too), checking as often as needed."""
        while True:
            timeout = self.settings.idle_timeout
            now = time.monotonic()
            retired: list[WarmAgy] = []
            with self._lock:
                idle_agys = [a for a in self._agys if a.state in IDLE]
                for agy in idle_agys:
                    if now - agy.last_used >= timeout:
                        self._retire(agy, retired)
                idle = [a.last_used for a in idle_agys if a not in retired]
            for agy in retired:
                log.info("warm agy %d idle for %.0fs: ended", agy.pid, timeout)
                agy.end(interrupt=False, grace=KILL_AFTER)
            next_due = min(idle, default=now) + timeout - time.monotonic() if idle else timeout
            self._wake.wait(max(0.05, next_due))
            self._wake.clear()

    def shutdown(self, grace: float = KILL_AFTER) -> None:
        """End every warm agy (the host is exiting, or a test is done); blocking."""
        with self._lock:
            self._closed = True
            agys = list(self._agys)
            for agy in agys:
                self.fire(agy, WarmEvent.RETIRED)  # ended below, all at once
        self._wake.set()
        for agy in agys:
            if not agy.exited.is_set():
                agy.signal_tree(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for agy in agys:
            if not agy.exited.wait(max(0.0, deadline - time.monotonic())):
                agy.signal_tree(signal.SIGKILL)
        for agy in agys:
            agy.exited.wait(READ_AFTER_EXIT)
        REGISTRY.forget_all()
        with self._lock:
            self._closed = False


def _answers(agy: WarmAgy, conversation_id: str) -> bool:
    """Whether idle `agy` could take a turn of `conversation_id` (a spare, for a new one), its
    key aside (lock held)."""
    if conversation_id:
        return agy.state is WarmState.READY and agy.conversation_id == conversation_id
    return agy.state in SPARES


def _spare_request(template: TurnRequest) -> TurnRequest:
    """A spare's own request: no conversation, a log file and token of its own."""
    log_file = template.log_file
    if log_file:
        log_file = str(Path(log_file).with_name(f"cli-agy-provider-{secrets.token_hex(8)}.log"))
    token = secrets.token_hex(16) if template.csrf_token else ""
    return dataclasses.replace(
        template, prompt="", conversation_id="", log_file=log_file, csrf_token=token
    )


POOL = WarmPool()
