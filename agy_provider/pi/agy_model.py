"""agy's models as pi `Model`s: the one builder every host, plugin and the CLI uses.

One set of values: agy states neither context windows nor output limits (0, pi's "unknown"), and
runs on a subscription (costs zero).
"""

from __future__ import annotations

from agy_provider.pi.types import Model

__all__ = ["AGY_API", "agy_model"]

# pi's `api` and `provider` for every agy model.
AGY_API = "agy"


def agy_model(model_id: str, *, name: str = "", reasoning: bool = True) -> Model:
    """pi's `Model` for the agy model `model_id` (a slug, `agy` or `default` for the configured
    one); `name` defaults to the id, `reasoning` to True (agy's models think)."""
    return Model(
        id=model_id,
        name=name or model_id,
        api=AGY_API,
        provider=AGY_API,
        base_url="",
        reasoning=reasoning,
        context_window=0,
        max_tokens=0,
    )
