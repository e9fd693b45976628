"""Phase 1 of a live turn, planning: settings, the conversation it continues (`continuity`),
the prompt, the event source and agy's argv — pure decisions, before any process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from agy_provider.agy.argv import JSON_SCHEMA_OPTION
from agy_provider.agy.database import last_step_index
from agy_provider.agy.models import model_arguments
from agy_provider.bridge.host_tools import plugin_tools_registered
from agy_provider.contract.turn import TurnContext
from agy_provider.errors import UsageError
from agy_provider.live.admission import COLD_STARTS
from agy_provider.live.admission import cold_starts_for
from agy_provider.live.continuity import Continuation
from agy_provider.live.continuity import conversation_key
from agy_provider.live.continuity import find_continuation
from agy_provider.live.discovery import agy_log_dir
from agy_provider.live.discovery import conversations_dir
from agy_provider.live.images import check_images
from agy_provider.live.images import newest_images
from agy_provider.live.prompt import build_prompt
from agy_provider.live.prompt import history_digest
from agy_provider.live.runner import TurnRequest
from agy_provider.live.settle import UNSAVED
from agy_provider.live.turn_edges import TurnEdges
from agy_provider.live.turn_edges import TurnPlan
from agy_provider.live.turn_edges import state_dir as agy_state_dir
from agy_provider.live.turn_options import TurnOptions
from agy_provider.live.warm.pool import POOL
from agy_provider.live.warm.pool import WarmSettings
from agy_provider.pi.options import SimpleStreamOptions
from agy_provider.pi.types import Context
from agy_provider.pi.types import Message
from agy_provider.pi.types import Model
from agy_provider.pi.types import ToolResultMessage
from agy_provider.plugin_manager import get_plugin_manager
from agy_provider.store.config import Config
from agy_provider.store.sessions import SessionRecord

__all__ = ["Planned", "TurnPlanner"]

log = logging.getLogger("agy_provider.live.turn")  # what hosts filter on for a turn's story

# pi's thinking levels -> agy's efforts.
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
# agy's own --print-timeout sits above our deadline, so we (not agy) decide when a turn is too long.
_PRINT_TIMEOUT_MARGIN = 60.0
# agy's own --print-timeout for a turn that offers host tools also allows this many full waits
# for the host (host_tool_timeout each): agy's clock does not stop while the host works.
_HOST_WAITS_IN_AGY_CLOCK = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    """What planning decided, for the later phases: the plan, the context plugins see (`ctx`),
    the plugin manager (`pm`), the messages agy never saw (`unseen`), the record of the
    conversation the turn continues, and a conversation agy no longer had."""

    plan: TurnPlan
    ctx: TurnContext
    pm: Any
    unseen: tuple[Message, ...] = ()
    conversation_record: SessionRecord | None = None
    lost_conversation: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class _Continuity:
    """Which agy conversation a turn continues ("" for a new one), from which step index, the
    messages agy never saw, how that was decided, its record, and a conversation agy lost."""

    conversation_id: str = ""
    min_index: int = -1
    unseen: tuple[Message, ...] = ()
    how: str = "new"
    record: SessionRecord | None = None
    lost: str = ""


class TurnPlanner:
    """Plans one turn (again, after agy forked the conversation it was to resume): `prepare`
    takes the turn's values and returns what it decided (`Planned`); it keeps nothing the
    later phases read."""

    def __init__(self, edges: TurnEdges) -> None:
        self.edges = edges
        self._stored: Mapping[str, SessionRecord] | None = None  # the store, as `prepare` read it

    def prepare(
        self,
        model: Model,
        context: Context,
        options: SimpleStreamOptions,
        how: TurnOptions,
        *,
        forked_from: str = "",
    ) -> Planned:
        """Settings, the session to resume, the prompt, the event source and agy's argv.

        `how` names agy's folder (`TurnOptions.in_folder`). `forked_from`: agy started another
        conversation when asked to resume this one, so the turn runs as a new conversation
        that carries the host's history. Runs in a worker thread.
        """
        pm = get_plugin_manager()
        self._stored = None
        config = self.edges.config()
        session_id = options.session_id or ""
        cwd = how.cwd
        assert cwd, "TurnOptions.in_folder() names the folder"
        check_images(newest_images(context))  # a bad image is refused before anything else
        binary = self.edges.find_agy(how.agy_bin or config.agy_bin)
        state_dir = agy_state_dir(config, binary)
        if forked_from:
            continued = _Continuity(lost=forked_from)
        else:
            continued = self._continuity(context, session_id, state_dir, how)
        self._stored = None  # the store's view maps its file: let it go
        conversation_id, min_index = continued.conversation_id, continued.min_index
        resume = bool(conversation_id)
        prompt = build_prompt(context, resume=resume, unseen=continued.unseen)
        ctx = TurnContext(
            session_id=session_id,
            prompt=prompt,
            cwd=cwd,
            config=config,
            event_source=how.event_source or config.event_source,
            permissions=config.permissions,
            min_index=min_index,
            continuity=continued.how,
            lost_conversation=continued.lost,
        )
        source_name = self._choose_source(pm, ctx)
        effort = _EFFORTS.get(options.reasoning or "", "") or config.thinking
        model_id = model.id if model.id not in ("", "agy", "default") else config.model
        wanted = self.edges.sources().get(ctx.event_source)
        # Under "auto" the turn may use any source, the language server's too.
        rpc_capable = ctx.event_source == "auto" or (wanted is not None and wanted.language_server)
        # agy logs its server's ports to a file of this turn alone, kept beside agy's own logs.
        log_file = (
            str(agy_log_dir(state_dir) / f"cli-agy-provider-{secrets.token_hex(8)}.log")
            if rpc_capable
            else ""
        )
        print_timeout = config.turn_timeout + _PRINT_TIMEOUT_MARGIN
        if context.tools and how.host_runs_tools:
            # Waits for the host's tool results stop our deadlines, not agy's own clock.
            print_timeout += _HOST_WAITS_IN_AGY_CLOCK * config.host_tool_timeout
        request = TurnRequest(
            prompt=prompt,
            cwd=cwd,
            agy_bin=binary,
            model_args=model_arguments(model_id, effort),
            mode=config.mode,
            skip_permissions=config.permissions == "skip",
            conversation_id=conversation_id,
            print_timeout=print_timeout,
            # Only an rpc-capable turn needs the token; agy builds before 1.2.2 may reject the flag.
            csrf_token=secrets.token_hex(16) if config.csrf and rpc_capable else "",
            env={"ANTIGRAVITY_APP_DATA_DIR": state_dir} if state_dir else {},
            log_file=log_file,
            json_schema=_json_schema(options),
        )
        plugin_tools = plugin_tools_registered(pm)
        offers_tools = bool(context.tools) or plugin_tools
        COLD_STARTS.configure(cold_starts_for(config.cold_starts))  # `live/admission`
        request = _warm_or_not(config, request)
        plan = TurnPlan(
            offers_tools=offers_tools,
            plugin_tools=plugin_tools,
            config=config,
            state_dir=state_dir,
            session_id=session_id,
            resume=resume,
            conversation_id=conversation_id,
            min_index=min_index,
            prompt=prompt,
            source_name=source_name,
            request=request,
        )
        return Planned(
            plan=plan,
            ctx=ctx,
            pm=pm,
            unseen=continued.unseen,
            conversation_record=continued.record,
            lost_conversation=continued.lost,
        )

    def _session(self, session_id: str) -> SessionRecord | None:
        if not session_id:
            return None
        unsaved = UNSAVED.get(str(self.edges.store.path), session_id)
        if unsaved is not None:
            return unsaved
        if self._stored is None:  # the store read once per planning; records parsed when asked
            self._stored = self.edges.store.all()
        return self._stored.get(session_id)

    def _continuity(
        self, context: Context, session_id: str, state_dir: str, how: TurnOptions
    ) -> _Continuity:
        """Which agy conversation this turn continues (`_Continuity`).

        A session id whose record's history matches (or `how.continues`) pins it by name;
        a conversation the caller names (`how.conversation_id`) is continued from its newest
        step; otherwise the transcript's newest marked message must prove it (`continuity`).
        A conversation whose database is gone is not resumed: the turn starts a new one that
        carries the host's history, and says so.
        """
        earlier = list(context.messages)
        # The history before the newest input: a user message, or the tool results that end it.
        if earlier and isinstance(earlier[-1], ToolResultMessage):
            while earlier and isinstance(earlier[-1], ToolResultMessage):
                earlier.pop()
        else:
            earlier = earlier[:-1]
        record = self._session(session_id)
        named = how.conversation_id
        if named:  # from its newest step; a lost one is said below
            path = conversations_dir(state_dir) / f"{named}.db"
            newest = last_step_index(path) if path.is_file() else -1
            record = SessionRecord(conversation_id=named, last_step_index=newest)
        conversation_id, min_index, decided = "", -1, "new"
        unseen: tuple[Message, ...] = ()
        previous: SessionRecord | None = None
        if record is not None and (
            how.continues or record.history_digest == history_digest(earlier)
        ):
            conversation_id, min_index, decided = (
                record.conversation_id,
                record.last_step_index,
                "session",
            )
        else:
            found: Continuation = find_continuation(earlier, self._session)
            if found.proven and found.record is not None:
                conversation_id, min_index = found.conversation_id, found.record.last_step_index
                unseen, decided = found.unseen, "mark"
                previous = found.record
                if found.unseen:
                    log.info(
                        "continuing agy conversation %s; %d message(s) since its last reply "
                        "go to agy as one block",
                        conversation_id,
                        len(found.unseen),
                    )
            elif earlier:
                log.info(
                    "starting a new agy conversation with the host's history as a preamble: %s",
                    f"session {session_id!r} has no matching record; {found.why}"
                    if session_id
                    else found.why,
                )
        if not conversation_id:
            return _Continuity()
        if previous is None or previous.conversation_id != conversation_id:
            previous = self._session(conversation_key(conversation_id))
        if not (conversations_dir(state_dir) / f"{conversation_id}.db").is_file():
            log.warning(
                "agy no longer has conversation %s (no %s.db in %s); starting a new one that "
                "carries the host's history",
                conversation_id,
                conversation_id,
                conversations_dir(state_dir),
            )
            return _Continuity(lost=conversation_id)
        return _Continuity(conversation_id, min_index, unseen, decided, previous)

    def _choose_source(self, pm: Any, ctx: TurnContext) -> str:
        available = list(self.edges.sources())
        name = pm.hook.choose_event_source(turn=ctx, available=available)
        if not name:
            raise UsageError(
                f"event source {ctx.event_source!r} is not available here "
                f"(available: {', '.join(available) or 'none'})"
            )
        return str(name)


def _json_schema(options: SimpleStreamOptions) -> str:
    """The structured output's schema a host asked for (`metadata[JSON_SCHEMA_OPTION]`), as JSON."""
    schema = (options.metadata or {}).get(JSON_SCHEMA_OPTION)
    if schema is None:
        return ""
    if not isinstance(schema, dict):
        raise UsageError(f"{JSON_SCHEMA_OPTION}: a JSON Schema must be an object")
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _warm_or_not(config: Config, request: TurnRequest) -> TurnRequest:
    """The request run in a warm agy when the settings allow (the pool's bounds from them)."""
    if not config.warm:
        return request
    POOL.configure(WarmSettings(config.warm_max, config.warm_idle_timeout, config.warm_spares))
    return dataclasses.replace(request, warm=True)
