"""serve's model names: the names clients know (Claude's, OpenAI's) mapped to agy's models, the
fallback for a name nothing maps, and the aliases `/v1/models` lists beside agy's own ids.

Pure: a map and a catalog in, a `ModelChoice` out; `RequestError` (404) for a name nothing
answers when the fallback is switched off.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable
from collections.abc import Sequence

from agy_provider.hosts.serve.ask import RequestError

__all__ = [
    "DEFAULT_MODEL_MAP",
    "NO_MODEL",
    "ModelChoice",
    "ModelMap",
    "parse_model_map",
]

# The target that refuses a name (`*=none` switches the fallback off).
NO_MODEL = "none"
_DEFAULT = "default"

# Tried after the user's own entries, in this order. A target may itself be a pattern: the first
# model of agy's catalog it matches (agy lists newest first), so a new agy release needs no new
# default; a target agy does not offer passes the name on to the entries below it.
DEFAULT_MODEL_MAP: tuple[tuple[str, str], ...] = (
    ("*opus*", "claude-opus-*"),
    ("*sonnet*", "claude-sonnet-*"),
    ("*haiku*", "gemini-*-flash"),  # Claude Code's small, fast model for background work
    ("claude-*", "claude-sonnet-*"),
    ("gpt-*", _DEFAULT),
    ("chatgpt-*", _DEFAULT),
    ("o[0-9]*", _DEFAULT),  # o1, o3-mini, o4-mini, …
    ("*", _DEFAULT),  # the fallback
)
# Names `/v1/models` lists beside agy's ids (when the map answers them): what Claude and OpenAI
# clients offer in their pickers.
_LISTED = ("opus", "sonnet", "haiku", "gpt-5", "gpt-4o", "o3")


@dataclasses.dataclass(frozen=True, slots=True)
class ModelChoice:
    """Which agy model answers a request: `asked` (the client's name), `used` (an agy id or
    `default`) and `how` it was chosen: `agy` (agy's own id), `map` (an entry) or `fallback`."""

    asked: str
    used: str
    how: str


def parse_model_map(entries: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`PATTERN=MODEL` entries (each string may hold several, comma-separated) in order.

    Raises `ValueError` saying which entry is malformed.
    """
    parsed: list[tuple[str, str]] = []
    for entry in entries:
        for item in entry.split(","):
            item = item.strip()
            if not item:
                continue
            pattern, sep, target = item.partition("=")
            pattern, target = pattern.strip(), target.strip()
            if not sep or not pattern or not target:
                raise ValueError(
                    f"model map entry {item!r}: expected PATTERN=MODEL, e.g. "
                    f"'claude-*sonnet*=gemini-3.8-flash' or '*=none' (no fallback)"
                )
            parsed.append((pattern, target))
    return tuple(parsed)


class ModelMap:
    """The user's entries, then `DEFAULT_MODEL_MAP`: the first entry whose pattern matches the
    asked name (case-insensitive globs) and whose target agy offers decides."""

    def __init__(self, entries: Sequence[tuple[str, str]] = ()) -> None:
        self.entries = (*entries, *DEFAULT_MODEL_MAP)

    def choose(self, asked: str, catalog: Sequence[str] | None) -> ModelChoice:
        """The model for `asked`; `catalog`: agy's ids (None when agy could not list them:
        a name is then taken as agy's and the entries give way to it).

        Raises `RequestError` (404) for a name whose first matching entry is `none`.
        """
        name = asked.removeprefix("agy/")  # a provider prefix some clients add
        if name == _DEFAULT or catalog is None or name in catalog:
            return ModelChoice(asked, name, "agy")
        for pattern, target in self.entries:
            if not fnmatch.fnmatchcase(name.lower(), pattern.lower()):
                continue
            if target == NO_MODEL:
                raise RequestError(
                    f"model: {asked!r} is not one of agy's models and no model map entry "
                    "answers it; GET /v1/models lists the names served",
                    status=404,
                    param="model",
                )
            used = _offered(target, catalog)
            if used:
                return ModelChoice(asked, used, "fallback" if pattern == "*" else "map")
        raise RequestError(  # only a map with no `*` entry of its own reaches here
            f"model: {asked!r} is not one of agy's models", status=404, param="model"
        )

    def aliases(self, catalog: Sequence[str]) -> list[tuple[str, str]]:
        """(a name clients send, the agy model it runs) for `/v1/models`: the user's entries
        that name one model (no pattern), then `_LISTED`, as far as the map answers them."""
        names = [p for p, _ in self.entries if not any(c in p for c in "*?[")]
        listed: list[tuple[str, str]] = []
        for name in dict.fromkeys((*names, *_LISTED)):
            if name in catalog or name == _DEFAULT:
                continue
            try:
                choice = self.choose(name, catalog)
            except RequestError:
                continue
            if choice.how == "map":
                listed.append((name, choice.used))
        return listed


def _offered(target: str, catalog: Sequence[str]) -> str:
    """`target` as agy offers it: itself, the first catalog id it matches as a pattern, or ""."""
    if target == _DEFAULT or target in catalog:
        return target
    if any(c in target for c in "*?["):
        return next((m for m in catalog if fnmatch.fnmatchcase(m, target)), "")
    return ""
