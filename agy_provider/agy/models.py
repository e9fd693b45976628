"""Parse `agy models` output into model families, and choose `--model`/`--effort` for a turn.

Tiered families (`gemini-3.8-flash-{high,medium,low}`) collapse to a base with an effort list (AGY-FORMATS §2).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable
from collections.abc import Sequence

from agy_provider.errors import SourceError
from agy_provider.errors import UsageError

__all__ = [
    "AgyModel",
    "display_names_only",
    "list_models",
    "model_arguments",
    "parse_models",
    "supports_effort",
]

_SLUG = re.compile(r"[a-z0-9][a-z0-9.\-]*[a-z0-9]")
_TIERS = ("high", "medium", "low")
# agy 1.2.x adds a tier above high that no model lists as a slug of its own (AGY-FORMATS §2.2).
_EXTRA_EFFORTS = ("max",)
# What agy before 1.1.5 printed instead of slugs: a display name such as `Gemini 3 Flash` or
# `Claude Sonnet 4.5 (Thinking)`; log lines (`I1130 …`) and notices are told apart by shape.
_DISPLAY_NAME = re.compile(r"[A-Z][A-Za-z0-9.\-]*(?: [A-Za-z0-9.\-]+)+(?: \([A-Za-z0-9 .\-]+\))?")
_LOG_LINE = re.compile(r"[IWEF]\d{4} ")
_NOT_SIGNED_IN = "not logged in"
_TIER_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<tier>high|medium|low)$")
_NAME_TIER = re.compile(r"\s*\((High|Medium|Low)\)\s*$")
# Families agy rejects --effort for (AGY-FORMATS §2).
_NO_EFFORT_PREFIXES = ("claude-", "gpt-oss")


@dataclasses.dataclass(frozen=True, slots=True)
class AgyModel:
    """One selectable model: its slug, display name and the efforts it offers (may be empty)."""

    id: str
    name: str
    efforts: tuple[str, ...] = ()

    @property
    def reasoning(self) -> bool:
        return bool(self.efforts) or "thinking" in self.name.lower()


def supports_effort(slug: str) -> bool:
    return not slug.startswith(_NO_EFFORT_PREFIXES)


def parse_models(output: str) -> list[AgyModel]:
    """Models from `agy models` stdout; log lines and notices are ignored.

    Accepts the ≥1.1.25 `slug<TAB>Display Name` lines and older bare-slug lines.
    """
    entries: list[tuple[str, str]] = []
    for line in output.splitlines():
        first, _, rest = line.strip().partition("\t")
        first = first.strip()
        if not _SLUG.fullmatch(first) or not any(c.isdigit() or c == "-" for c in first):
            continue
        entries.append((first, rest.strip() or first))
    return collapse_tiers(entries)


def collapse_tiers(entries: Iterable[tuple[str, str]]) -> list[AgyModel]:
    """Group `base-high/-medium/-low` into one model `base` with efforts, keeping first-seen order."""
    order: list[str] = []
    families: dict[str, tuple[str, list[str]]] = {}
    singles: dict[str, str] = {}
    for slug, name in entries:
        match = _TIER_SUFFIX.match(slug)
        if match and supports_effort(slug):
            base = match["base"]
            if base not in families:
                families[base] = (_NAME_TIER.sub("", name), [])
                order.append(base)
            families[base][1].append(match["tier"])
        elif slug not in singles:
            singles[slug] = name
            order.append(slug)
    models = []
    for key in order:
        if key in families:
            name, tiers = families[key]
            efforts = tuple(t for t in _TIERS if t in tiers)
            models.append(AgyModel(id=key, name=name, efforts=efforts))
        else:
            models.append(AgyModel(id=key, name=singles[key]))
    return models


def model_arguments(model: str, effort: str, known: Sequence[AgyModel] = ()) -> list[str]:
    """`--model`/`--effort` for a turn: effort only where the model takes one.

    `model` may be a base with tiers (`gemini-3.8-flash`, then `effort` picks the tier) or a full
    slug (`gemini-3.8-flash-high`, effort ignored). Raises `UsageError` for an effort the model
    does not offer, or a model id that could become a flag.
    """
    if not model:
        return []
    if not _SLUG.fullmatch(model):
        raise UsageError(f"not a model id agy accepts: {model!r}")
    args = ["--model", model]
    if not effort or not supports_effort(model) or _TIER_SUFFIX.match(model):
        return args
    family = next((m for m in known if m.id == model), None)
    if family is not None and not family.efforts:
        return args
    if effort in _EXTRA_EFFORTS:
        return [*args, "--effort", effort]  # agy ≥ 1.2 decides; older builds refuse it clearly
    if family is not None and effort not in family.efforts:
        raise UsageError(f"{model} offers effort {', '.join(family.efforts)}, not {effort}")
    if effort not in _TIERS:
        raise UsageError(f"effort must be low, medium, high or max, not {effort!r}")
    return [*args, "--effort", effort]


def list_models(binary: str, *, timeout: float = 60.0) -> list[AgyModel]:
    """Run `agy models` and parse what it prints. Raises `SourceError` when it fails or says nothing.

    stdin is /dev/null and the auto-updater is off, as for every agy we start.
    """
    try:
        done = subprocess.run(
            [binary, "models"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "AGY_CLI_DISABLE_AUTO_UPDATE": "1"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceError(f"`{binary} models` failed: {exc}") from exc
    models = parse_models(done.stdout)
    if not models:
        raise SourceError(_no_models_message(binary, done.stdout, done.stderr, done.returncode))
    return models


def display_names_only(output: str) -> list[str]:
    """The display names an agy before 1.1.5 printed instead of slugs (`Gemini 3 Flash`), if any.

    Empty when the output has slugs, or names nothing at all (log lines and notices only).
    """
    if parse_models(output):
        return []
    names = []
    for line in output.splitlines():
        line = line.strip()
        if not line or "\t" in line or _LOG_LINE.match(line) or line.endswith(("...", ".")):
            continue
        if _NOT_SIGNED_IN in line.lower() or not any(c.isdigit() for c in line):
            continue
        if _DISPLAY_NAME.fullmatch(line):
            names.append(line)
    return names


def _no_models_message(binary: str, stdout: str, stderr: str, returncode: int) -> str:
    """Why `agy models` gave no slugs, and what to do: an old agy is not a sign-in problem."""
    names = display_names_only(stdout)
    if names:
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        return (
            f"`{binary} models` printed display names only ({shown}): this agy prints display "
            "names only; upgrade agy to ≥1.1.5 to list model slugs (or pass a slug you know "
            "with --model)"
        )
    said = (stderr or stdout).strip()[-500:] or f"exit code {returncode}"
    if _NOT_SIGNED_IN in (stdout + stderr).lower():
        return f"`{binary} models` listed no models ({said}); sign in by running agy once"
    return f"`{binary} models` listed no models ({said}); is agy signed in?"
