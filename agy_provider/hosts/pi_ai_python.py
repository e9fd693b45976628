"""agy as a pi-ai-python (`pi_ai`, with its `pi_agent`) provider: `provider()`.

Owns the translation between pi_ai's data classes and ours, through pi's JSON, both ways:

    models = pi_ai.create_models()
    models.set_provider(provider())
    model = models.get_model("agy", "gemini-3.7-flash")
    message = await models.complete_simple(model, pi_ai.Context(messages=[pi_ai.UserMessage("hi")]))
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from pi_ai.auth.types import ApiKeyAuth
from pi_ai.auth.types import AuthResult
from pi_ai.auth.types import ModelAuth
from pi_ai.auth.types import ProviderAuth
from pi_ai.event_stream import AssistantMessageEventStream
from pi_ai.models import Provider
from pi_ai.models import create_provider
from pi_ai.serialization import event_from_dict
from pi_ai.serialization import model_from_dict
from pi_ai.types import Model
from pi_ai.types import TranscriptContext

from agy_provider.agy.models import AgyModel
from agy_provider.errors import AgyError
from agy_provider.hosts.turns import PROVIDER_ID
from agy_provider.hosts.turns import agy_catalog
from agy_provider.hosts.turns import host_events
from agy_provider.hosts.turns import pi_models

__all__ = ["provider"]

log = logging.getLogger(__name__)


class _AgyStreams:
    """pi_ai's `ProviderStreams` for agy: both entry points run one agy turn."""

    def __init__(self, turn_kwargs: Mapping[str, Any]) -> None:
        self._turn_kwargs = dict(turn_kwargs)

    def stream(
        self, model: Model, context: TranscriptContext, options: Mapping[str, Any] | None = None
    ) -> AssistantMessageEventStream:
        return self.stream_simple(model, context, options)

    def stream_simple(
        self, model: Model, context: TranscriptContext, options: Mapping[str, Any] | None = None
    ) -> AssistantMessageEventStream:
        out = AssistantMessageEventStream()

        async def relay() -> None:
            async for event in host_events(model, context, options, **self._turn_kwargs):
                out.push(event_from_dict(event.to_json()))

        out.start(relay())
        return out


async def _no_credentials(**_: Any) -> AuthResult:
    # agy signs itself in (its own Google account); pi_ai has no key to hold for it.
    return AuthResult(ModelAuth())


def provider(
    *,
    agy_bin: str | None = None,
    cwd: str | None = None,
    models: Sequence[AgyModel] | None = None,
) -> Provider:
    """A `pi_ai` Provider with id `agy` serving agy's models (`agy models`, asked on first use).

    `models` replaces that list (for example from `agy_provider.store.model_catalog`); `agy_bin` and
    `cwd` apply to every turn (agy runs its tools in `cwd`). Listing fails quietly as pi_ai
    wants (no models) when agy cannot be found; a turn then ends with an `error` event saying so.
    """
    kwargs: dict[str, Any] = {"agy_bin": agy_bin, "cwd": cwd}
    listed: list[Model] = []

    def catalog() -> Sequence[Model]:
        if not listed:
            try:
                found = list(models) if models is not None else agy_catalog(agy_bin)
            except AgyError as exc:
                log.warning(
                    "agy's models could not be listed, so provider 'agy' offers none: %s", exc
                )
                return []
            listed.extend(model_from_dict(m.to_json()) for m in pi_models(found))
        return listed

    return create_provider(
        id=PROVIDER_ID,
        name="Antigravity (agy)",
        auth=ProviderAuth(api_key=ApiKeyAuth("agy's own sign-in", _no_credentials)),
        models=catalog,
        api=_AgyStreams(kwargs),
    )
