"""The Connect methods of the simulated language server, as agy's LanguageServerService answers.

Owns each method's request checks, response JSON and Connect errors, and forwarding to the parent;
the live stream itself is `agent_stream`'s.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import Protocol

from agy_provider.sim.agent_stream import AgentStateStream
from agy_provider.sim.agent_stream import Conversation
from agy_provider.sim.agent_stream import FrameSink
from agy_provider.sim.agent_stream import FrameWriter
from agy_provider.sim.agent_stream import ServerFaults
from agy_provider.sim.agent_stream import StreamPhase
from agy_provider.sim.agent_stream import present
from agy_provider.wire.connect import FLAG_COMPRESSED
from agy_provider.wire.connect import encode_json_envelope

__all__ = [
    "CONNECT_CODE_HTTP_STATUS",
    "SERVICE_PATH_PREFIX",
    "STREAM_METHOD",
    "ConnectError",
    "LanguageServerService",
    "ModelEntry",
    "ParentLink",
    "decode_request_envelope",
]

# Connect's code → HTTP status table (connectrpc.com/docs/protocol, "Error Codes").
CONNECT_CODE_HTTP_STATUS: Final[Mapping[str, int]] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

# How long a forwarded request waits for the parent's reply. A permission answer makes the parent
# resume a turn, which is quick; a parent that does not answer in this time is wedged.
_PARENT_REPLY_TIMEOUT_S: Final = 30.0
_SERVICE: Final = "exa.language_server_pb.LanguageServerService"


class ConnectError(Exception):
    """A Connect error: `code` from Connect's table and agy's `message`; `status` overrides the
    HTTP status the table gives (agy answers some plain Go errors as 500)."""

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        self.code = code
        self.message = message
        self.status = status if status is not None else CONNECT_CODE_HTTP_STATUS.get(code, 500)
        super().__init__(f"{code}: {message}")

    def to_json(self) -> dict[str, str]:
        """The Connect error body."""
        return {"code": self.code, "message": self.message}


def _not_found() -> ConnectError:
    # agy's trajectory lookups fail with a plain Go error, which Connect reports as `unknown`/500.
    return ConnectError("unknown", "trajectory not found")


class ParentLink(Protocol):
    """The control channel to the simulated agy parent (CONTRACT.md): one request, one reply."""

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send `message` (the link adds `seq`) and return the parent's reply."""
        ...


@dataclass(frozen=True)
class ModelEntry:
    """One model of GetAvailableModels: its key (the slug), enum name and display name."""

    slug: str
    display_name: str
    model_enum: str
    supports_thinking: bool = True


def _int_field(value: object, what: str) -> int:
    # Protobuf JSON accepts integers as numbers or as decimal strings.
    if isinstance(value, bool):
        raise ConnectError("invalid_argument", f"invalid value for {what}: {value!r}")
    if isinstance(value, int):
        return value
    # ASCII digits only: "²".isdigit() is True, but int("²") raises.
    if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit():
        return int(value)
    raise ConnectError("invalid_argument", f"invalid value for {what}: {value!r}")


def _page_bounds(value: object) -> tuple[int, int | None]:
    """`initialStepsPageBounds` {startIndex, endIndexExclusive} (agy's `Slice`, int32s): the
    steps the first frame replays. Unset: all of them. An unset or zero end is taken as no
    bound (an assumption; agy's handling is unverified, and our client always sends one)."""
    bounds = _object(value, "initialStepsPageBounds")
    start = _int_field(bounds.get("startIndex", 0), "initialStepsPageBounds.startIndex")
    end = _int_field(bounds.get("endIndexExclusive", 0), "initialStepsPageBounds.endIndexExclusive")
    if start < 0 or end < 0:
        raise ConnectError("invalid_argument", f"invalid page bounds: {bounds!r}")
    return start, end or None


def _object(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConnectError("invalid_argument", f"invalid value for {what}: expected an object")
    return value


def decode_request_envelope(body: bytes) -> dict[str, Any]:
    """The JSON message of a server-stream request body (one Connect envelope).

    Raises:
        ConnectError: the body is not one whole envelope of a JSON object, worded as connect-go
            words it (a bare JSON body "promises" a length read from its first bytes).
    """
    if len(body) < 5:
        raise ConnectError(
            "invalid_argument", "protocol error: incomplete envelope: unexpected EOF"
        )
    flags, length = struct.unpack(">BI", body[:5])
    got = len(body) - 5
    if got < length:
        raise ConnectError(
            "invalid_argument",
            f"protocol error: promised {length} bytes in enveloped message, got {got} bytes",
        )
    if flags & FLAG_COMPRESSED:
        raise ConnectError(
            "internal", "protocol error: sent compressed message without compression"
        )
    try:
        message = json.loads(body[5 : 5 + length].decode("utf-8") or "{}")
    except (ValueError, RecursionError) as exc:
        raise ConnectError("invalid_argument", f"unmarshal message: {exc}") from exc
    return _object(message, "request")


UnaryHandler = Callable[["LanguageServerService", dict[str, Any]], Awaitable[dict[str, Any]]]


class LanguageServerService:
    """agy's LanguageServerService, the part the provider uses, over this server's conversations.

    Unary methods take the request JSON and return the response JSON or raise `ConnectError`;
    `stream_agent_state_updates` writes envelopes to a `FrameSink`.
    """

    def __init__(
        self,
        parent: ParentLink,
        *,
        faults: ServerFaults | None = None,
        catalog: tuple[ModelEntry, ...] = (),
        default_model: str | None = None,
    ) -> None:
        self.parent = parent
        self.faults = faults or ServerFaults()
        self.catalog = catalog
        self.default_model = default_model or (catalog[0].slug if catalog else "")
        self.conversations: dict[str, Conversation] = {}
        self._frames = FrameWriter(self.faults)
        self.closing = asyncio.Event()

    # --- the parent's notifications --------------------------------------------------------

    def host(self, conversation: Conversation) -> None:
        """Start hosting a conversation (the parent's `conversation` notification)."""
        old = self.conversations.get(conversation.id)
        if old is not None:
            old.steps.close()
            conversation.status, conversation.turns_started = old.status, old.turns_started
        self.conversations[conversation.id] = conversation
        if old is not None:
            old.notify()

    def changed(self, conversation_id: str) -> None:
        """The parent committed to that conversation's database."""
        conversation = self.conversations.get(conversation_id)
        if conversation is not None and conversation.steps.refresh():
            conversation.notify()

    def close(self) -> None:
        """Close every database connection."""
        for conversation in self.conversations.values():
            conversation.steps.close()

    # --- unary methods ---------------------------------------------------------------------

    def method(self, name: str) -> UnaryHandler | None:
        """The unary handler for `name`, or None when this server does not implement it."""
        return _UNARY_METHODS.get(name)

    def _conversation(self, body: dict[str, Any], key: str) -> Conversation:
        conversation_id = body.get(key)
        conversation = self.conversations.get(conversation_id) if conversation_id else None
        if conversation is None:
            raise _not_found()
        conversation.steps.refresh()
        return conversation

    async def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        """Heartbeat `{}` → `{}`: marks a live Connect port."""
        return {}

    async def get_conversation_metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{conversationId}` → `{metadata: {rootConversationId}}`; unknown → 500."""
        conversation = self._conversation(body, "conversationId")
        return {"metadata": {"rootConversationId": conversation.id}}

    async def get_all_cascade_trajectories(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{}` → `{trajectorySummaries: {id: summary}}` for the conversations hosted here."""
        summaries: dict[str, Any] = {}
        for conversation in self.conversations.values():
            conversation.steps.refresh()
            steps = conversation.steps
            summaries[conversation.id] = present(
                trajectoryId=conversation.trajectory_id,
                status=conversation.status,
                stepCount=len(steps),
                summary=steps.title(),
                lastUserInputStepIndex=steps.last_user_input_index(),
                trajectoryMetadata={"rootConversationId": conversation.id},
            )
        return present(trajectorySummaries=summaries)

    async def get_cascade_trajectory_steps(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{cascadeId, stepOffset?}` → `{steps}`: the poll shape, from `stepOffset` on."""
        conversation = self._conversation(body, "cascadeId")
        offset = _int_field(body.get("stepOffset", 0), "stepOffset")
        steps = conversation.steps
        wanted = [i for i in steps.indices() if i >= offset]  # only these are rendered
        return present(steps=[step for _, step in steps.rendered(wanted)])

    async def get_available_models(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{}` → `{response: {models, defaultAgentModelId}}` from the scenario's catalog."""
        models = {
            entry.slug: present(
                model=entry.model_enum,
                displayName=entry.display_name,
                recommended=entry.slug == self.default_model,
                supportsThinking=entry.supports_thinking,
            )
            for entry in self.catalog
        }
        return {"response": present(models=models, defaultAgentModelId=self.default_model)}

    async def wait_for_conversation_fully_idle(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{conversationId}` → `{}` once no turn is running in that conversation."""
        conversation = self._conversation(body, "conversationId")
        while conversation.running:
            wakeup = conversation.wakeup
            await wakeup.wait()
            conversation = self.conversations.get(conversation.id, conversation)
        return {}

    async def handle_cascade_user_interaction(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer a WAITING step's permission or question; the parent decides if it is current."""
        conversation = self._conversation(body, "cascadeId")
        interaction = _object(body.get("interaction"), "interaction")
        # agy reads trajectoryId and stepIndex inside `interaction` only; top-level copies are
        # dropped, so a client that puts them there answers step 0 of no trajectory.
        if interaction.get("trajectoryId", "") != conversation.trajectory_id:
            raise _not_found()
        step_index = _int_field(interaction.get("stepIndex", 0), "stepIndex")
        request: dict[str, Any] = {"op": "interaction", "id": conversation.id}
        request["stepIndex"] = step_index
        if "permission" in interaction:
            permission = _object(interaction["permission"], "permission")
            request["permission"] = {"allow": permission.get("allow") is True}
        elif "askQuestion" in interaction:
            answer = _object(interaction["askQuestion"], "askQuestion")
            responses = answer.get("responses", [])
            if not isinstance(responses, list):
                raise ConnectError("invalid_argument", "invalid value for responses")
            request["askQuestion"] = {"responses": responses}
        else:
            # The other interaction kinds are not simulated; nothing waits for them.
            raise ConnectError("unknown", f"input not registered for step {step_index}")
        await self._forward(request)
        return {}

    async def cancel_cascade_steps(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{cascadeId, stepIndices?}` → `{}`; stops RUNNING work, a WAITING step stays."""
        conversation = self._conversation(body, "cascadeId")
        raw = body.get("stepIndices")
        indices = None if raw is None else [_int_field(i, "stepIndices") for i in list(raw)]
        await self._forward({"op": "cancel", "id": conversation.id, "stepIndices": indices})
        return {}

    async def start_cascade(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{cascadeId?, source}` → `{cascadeId}`: the parent creates (or reuses) it."""
        wanted = body.get("cascadeId") or None
        reply = await self._forward({"op": "start_cascade", "id": wanted})
        cascade_id = reply.get("id") or wanted
        if not isinstance(cascade_id, str) or not cascade_id:
            raise ConnectError("internal", "start cascade: no cascade id")
        return {"cascadeId": cascade_id}

    async def send_user_cascade_message(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{cascadeId, items, cascadeConfig}` → `{}`; the parent runs the turn."""
        conversation = self._conversation(body, "cascadeId")
        config = _object(body.get("cascadeConfig"), "cascadeConfig")
        planner = _object(config.get("plannerConfig"), "plannerConfig")
        model = planner.get("planModel") or planner.get("requestedModel") or ""
        if isinstance(model, dict):
            model = model.get("model") or ""
        if not isinstance(model, str) or not model:
            raise ConnectError("invalid_argument", "neither PlanModel nor RequestedModel specified")
        items = body.get("items") or []
        if not isinstance(items, list):
            raise ConnectError("invalid_argument", "invalid value for items")
        text = "".join(i.get("text", "") for i in items if isinstance(i, dict))
        await self._forward(
            {"op": "send_message", "id": conversation.id, "text": text, "model": model}
        )
        return {}

    async def _forward(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await asyncio.wait_for(self.parent.request(request), _PARENT_REPLY_TIMEOUT_S)
        except TimeoutError as exc:
            raise ConnectError("unavailable", f"{request['op']}: agy did not answer") from exc
        except ConnectionError as exc:
            raise ConnectError("unavailable", f"{request['op']}: agy is gone") from exc
        if reply.get("ok") is not True:
            message = reply.get("error")
            raise ConnectError("unknown", str(message) if message else f"{request['op']} failed")
        return reply

    # --- the server stream -----------------------------------------------------------------

    async def stream_agent_state_updates(
        self, body: bytes, sink: FrameSink, client_gone: asyncio.Event
    ) -> StreamPhase:
        """Serve one StreamAgentStateUpdates call (field guide §4.4); returns how it finished.

        Blocks with no frame while the conversation is idle; when a turn runs, replays every
        step in one frame, then sends a frame per change, and ends cleanly when the turn
        settles. Errors after the 200 go in the end-of-stream frame, as Connect streams do.
        """
        try:
            request = decode_request_envelope(body)
            conversation_id = request.get("conversationId")
            conversation = self.conversations.get(conversation_id) if conversation_id else None
            if conversation is None:
                raise _not_found()
            page = _page_bounds(request.get("initialStepsPageBounds"))
        except ConnectError as exc:
            await sink.send(encode_json_envelope({"error": exc.to_json()}, end_stream=True))
            return StreamPhase.ENDED
        stream = AgentStateStream(
            self.conversations, conversation, sink, client_gone, self._frames, self.closing, page
        )
        return await stream.run()


_UNARY_METHODS: Final[dict[str, UnaryHandler]] = {
    "Heartbeat": LanguageServerService.heartbeat,
    "GetConversationMetadata": LanguageServerService.get_conversation_metadata,
    "GetAllCascadeTrajectories": LanguageServerService.get_all_cascade_trajectories,
    "GetCascadeTrajectorySteps": LanguageServerService.get_cascade_trajectory_steps,
    "GetAvailableModels": LanguageServerService.get_available_models,
    "HandleCascadeUserInteraction": LanguageServerService.handle_cascade_user_interaction,
    "CancelCascadeSteps": LanguageServerService.cancel_cascade_steps,
    "StartCascade": LanguageServerService.start_cascade,
    "SendUserCascadeMessage": LanguageServerService.send_user_cascade_message,
    "WaitForConversationFullyIdle": LanguageServerService.wait_for_conversation_fully_idle,
}
STREAM_METHOD: Final = "StreamAgentStateUpdates"
SERVICE_PATH_PREFIX: Final = f"/{_SERVICE}/"
