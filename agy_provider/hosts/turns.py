"""What every host adapter shares: agy's model catalog as pi models, the one way a host starts a
turn (`start_turn`), and a turn whose misuse errors arrive as an `error` event (host stream
contracts forbid raising).

Private to `agy_provider.hosts`; each host module converts these values to its own types.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from agy_provider.agy.models import AgyModel
from agy_provider.agy.models import list_models
from agy_provider.errors import AgyError
from agy_provider.errors import UsageError
from agy_provider.live.provider import stream_simple
from agy_provider.live.runner import find_agy
from agy_provider.pi.abort_bridge import forward_until_turn_ends
from agy_provider.pi.agy_model import AGY_API
from agy_provider.pi.agy_model import agy_model
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.events import ErrorEvent
from agy_provider.pi.host_input import HostTurn
from agy_provider.pi.host_input import normalise_turn
from agy_provider.pi.options import AbortSignal
from agy_provider.pi.stream import AssistantMessageEventStream
from agy_provider.pi.types import AssistantMessage
from agy_provider.pi.types import Model
from agy_provider.store.config import load_config

__all__ = [
    "DEFAULT_MODEL_ID",
    "PROVIDER_ID",
    "agy_catalog",
    "host_events",
    "pi_models",
    "refusal",
    "start_turn",
]

PROVIDER_ID = AGY_API
# The model id that means "agy's configured default" (the `model` setting, else agy's own).
DEFAULT_MODEL_ID = "default"


def agy_catalog(agy_bin: str | None = None) -> list[AgyModel]:
    """The models `agy models` lists (tiered families folded into bases with efforts).

    Raises `SourceError` when agy cannot be found or lists nothing (with what to do).
    """
    return list_models(find_agy(agy_bin or load_config().agy_bin))


def pi_models(catalog: list[AgyModel]) -> list[Model]:
    """agy's models as pi `Model`s of provider `agy` (`agy_model`), after the configured
    default (`default`)."""
    return [
        agy_model(DEFAULT_MODEL_ID, name="agy's configured model"),
        *(agy_model(m.id, name=m.name, reasoning=m.reasoning) for m in catalog),
    ]


async def host_events(
    model: Any, context: Any, options: Any, **kwargs: Any
) -> AsyncIterator[AssistantMessageEvent]:
    """The turn's pi events, for a host that forwards them into its own stream.

    Input `stream_simple` refuses is one `error` event instead (host stream contracts forbid
    raising). The host's abort signal ends the turn `aborted`; so does the host closing or
    cancelling its stream early (agy is never left running for a reader that went away).
    """
    try:
        turn = normalise_turn(model, context, options)
    except UsageError as exc:
        yield refusal(model, exc)
        return
    stop = AbortSignal()
    stream = start_turn(turn, stop, **kwargs)
    host_signal = turn.options.signal
    if host_signal is not None:
        # Until the turn ends, which may be after this stream: a stream that ends `toolUse`
        # leaves agy waiting for the host's tool results, and the host's abort must reach it.
        _keep(asyncio.ensure_future(forward_until_turn_ends(host_signal, stop, stream)))
    try:
        async for event in stream:
            yield event
    finally:
        if not stream.done:
            stop.abort("the host stopped reading the turn")


def start_turn(turn: HostTurn, stop: AbortSignal, **kwargs: Any) -> AssistantMessageEventStream:
    """Start `turn` (a host's input in our types) with `stop` as the abort signal the turn
    obeys, and return its stream; `kwargs` are `stream_simple`'s.

    The host's own signal (`turn.abort`) is attached to the stream; forwarding it for as long
    as the turn runs, and what ends the turn when the host stops reading, is the caller's.
    """
    stream = stream_simple(
        turn.model, turn.context, dataclasses.replace(turn.options, signal=stop), **kwargs
    )
    if turn.abort is not None:
        turn.abort.attach(stream)
    return stream


_following: set[asyncio.Future[None]] = set()


def _keep(task: asyncio.Future[None]) -> None:
    _following.add(task)
    task.add_done_callback(_following.discard)


def refusal(model: Any, exc: AgyError) -> ErrorEvent:
    """The `error` event for a turn that could not start."""
    model_id = model if isinstance(model, str) else getattr(model, "id", None)
    if model_id is None and isinstance(model, dict):
        model_id = model.get("id")
    return ErrorEvent(
        reason="error",
        error=AssistantMessage(
            content=(),
            api=PROVIDER_ID,
            provider=PROVIDER_ID,
            model=str(model_id or ""),
            stop_reason="error",
            error_message=f"agy-provider could not start the turn: {exc}",
            timestamp=int(time.time() * 1000),
        ),
    )
