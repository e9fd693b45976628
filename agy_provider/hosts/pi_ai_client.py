"""agy as a pi-ai-client provider (import name `pi_ai`), for it and pi-agent-loop: `provider()`.

pi-ai-client cancels a stream with `stream.cancel()` (pi-agent-loop's `Agent.abort()` does so);
that ends the agy turn `aborted`:

    models = pi_ai.create_models()
    models.set_provider(provider())
    agent = pi_agent_loop.Agent(model=models.get_model("agy", "default"),
                                stream_fn=models.stream_simple,
                                stream_options={"session_id": "my-session"})

pi-ai-python installs the same import name `pi_ai`; the two cannot share one environment, so
this module checks that `pi_ai` is pi-ai-client's.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from agy_provider.agy.models import AgyModel
from agy_provider.errors import UsageError
from agy_provider.hosts.turns import PROVIDER_ID
from agy_provider.hosts.turns import agy_catalog
from agy_provider.hosts.turns import host_events
from agy_provider.hosts.turns import pi_models
from agy_provider.pi.events import AssistantMessageEvent
from agy_provider.pi.options import AbortSignal

__all__ = ["provider"]


def _pi_ai(module: str = "") -> Any:
    """pi-ai-client's `pi_ai` (or one of its modules); refuses pi-ai-python's, which has none
    of `pi_ai.registry`."""
    try:
        importlib.import_module("pi_ai.registry")
    except ImportError as exc:
        raise UsageError(
            "agy_provider.hosts.pi_ai_client needs pi-ai-client's `pi_ai` (pip install "
            "pi-ai-client); this `pi_ai` is another package's (pi-ai-python uses the same name: "
            "use agy_provider.hosts.pi_ai_python with it)"
        ) from exc
    return importlib.import_module(f"pi_ai{module}")


class _AgyStreams:
    """pi-ai-client's `ProviderStreams` for agy: both entry points run one agy turn."""

    def __init__(self, turn_kwargs: Mapping[str, Any]) -> None:
        self._turn_kwargs = dict(turn_kwargs)
        self._types = _pi_ai(".types")

    def stream(self, model: Any, context: Any, options: Mapping[str, Any]) -> Any:
        return self.stream_simple(model, context, options)

    def stream_simple(self, model: Any, context: Any, options: Mapping[str, Any]) -> Any:
        out = _pi_ai(".event_stream").AssistantMessageEventStream()
        stop = AbortSignal()
        # pi-ai-client has no abort signal: the host cancels the stream instead.
        out.on_cancel(lambda: stop.abort("the host cancelled the stream"))
        merged = {**options, "signal": stop}

        async def relay() -> None:
            async for event in host_events(model, context, merged, **self._turn_kwargs):
                out.push(self._event(event))

        out.settle_with(asyncio.ensure_future(relay()))
        return out

    def _event(self, event: AssistantMessageEvent) -> Any:
        name = "".join(part.capitalize() for part in event.type.split("_")) + "Event"
        cls = getattr(self._types, name.replace("Toolcall", "ToolCall"))
        return cls.model_validate(event.to_json())


class _AgyAuth:
    """agy signs itself in (its own Google account): pi-ai-client has no key to hold for it."""

    name = "agy's own sign-in"

    async def resolve(self, *, ctx: Any, credential: Any) -> Any:
        auth = _pi_ai(".auth.types")
        return auth.AuthResult(auth=auth.ModelAuth(), source="agy")


def provider(
    *,
    agy_bin: str | None = None,
    cwd: str | None = None,
    models: Sequence[AgyModel] | None = None,
) -> Any:
    """A pi-ai-client `Provider` with id `agy` serving agy's models (`agy models`, asked now;
    `await models.refresh()` asks again). `agy_bin` and `cwd` apply to every turn.

    Raises `SourceError` when agy cannot list its models, `UsageError` when `pi_ai` is not
    pi-ai-client's.
    """
    pi_ai = _pi_ai()

    def to_pi(found: Sequence[AgyModel]) -> list[Any]:
        return [pi_ai.Model.model_validate(m.to_json()) for m in pi_models(list(found))]

    async def fetch() -> list[Any]:
        from agy_provider.workers import off_loop

        return to_pi(await off_loop(agy_catalog, agy_bin))

    return pi_ai.create_provider(
        id=PROVIDER_ID,
        name="Antigravity (agy)",
        base_url="",
        auth={"api_key": _AgyAuth()},
        api=_AgyStreams({"agy_bin": agy_bin, "cwd": cwd}),
        models=to_pi(models if models is not None else agy_catalog(agy_bin)),
        fetch_models=None if models is not None else fetch,
    )
