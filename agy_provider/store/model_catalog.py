"""The models agy offers, remembered on disk, and the short names people use for them.

`agy models` spawns agy; hosts that list models often (`llm` asks on every invocation) read the
answer kept per binary instead. `resolve_model` turns `flash`, `pro`, `sonnet`, `opus` or a slug
into what `--model` takes, checked against that catalog.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agy_provider.agy.models import AgyModel
from agy_provider.agy.models import list_models
from agy_provider.errors import SourceError
from agy_provider.errors import UsageError
from agy_provider.store.atomic import file_lock
from agy_provider.store.atomic import read_json
from agy_provider.store.atomic import write_json_atomic
from agy_provider.store.sessions import default_store_path

__all__ = [
    "ALIASES",
    "CATALOG_FILE",
    "CATALOG_MAX_AGE",
    "cached_models",
    "catalog_path",
    "resolve_model",
]

log = logging.getLogger(__name__)

CATALOG_FILE = "agy-models.json"
# Which models an account may use changes with agy's releases and Google's rollouts, not per
# call: a day-old list is current enough, and a new agy binary (size or mtime) asks again.
CATALOG_MAX_AGE = 24 * 3600.0
# A failed `agy models` (signed out, no network) is retried after this long, not on every call.
_FAILURE_MAX_AGE = 300.0

# Short names and the word each must contain as a whole `-`-separated part of the slug.
ALIASES: tuple[str, ...] = ("flash", "pro", "sonnet", "opus")


def catalog_path() -> Path:
    """`agy-models.json` beside the session store (`$AGY_PROVIDER_SESSIONS`'s folder)."""
    return default_store_path().parent / CATALOG_FILE


def _identity(binary: str) -> dict[str, Any] | None:
    try:
        real = os.path.realpath(binary)
        info = os.stat(real)
    except OSError:
        return None
    return {"path": real, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _to_json(models: Sequence[AgyModel]) -> list[dict[str, Any]]:
    return [{"id": m.id, "name": m.name, "efforts": list(m.efforts)} for m in models]


def _from_json(rows: object) -> list[AgyModel] | None:
    if not isinstance(rows, list):
        return None
    models = []
    for row in rows:
        if not isinstance(row, dict):
            return None
        mid, name, efforts = row.get("id"), row.get("name"), row.get("efforts", [])
        if not (isinstance(mid, str) and isinstance(name, str) and isinstance(efforts, list)):
            return None
        models.append(AgyModel(id=mid, name=name, efforts=tuple(str(e) for e in efforts)))
    return models


def _read_entry(path: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    try:
        stored = read_json(path)
    except (OSError, ValueError):
        return None
    entry = stored.get(identity["path"]) if isinstance(stored, dict) else None
    if not isinstance(entry, dict):
        return None
    if [entry.get("size"), entry.get("mtime_ns")] != [identity["size"], identity["mtime_ns"]]:
        return None
    return entry


def _write_entry(path: Path, identity: dict[str, Any], entry: dict[str, Any]) -> None:
    try:
        with file_lock(path):
            try:
                stored = read_json(path)
            except ValueError:
                stored = None
            stored = stored if isinstance(stored, dict) else {}
            stored[identity["path"]] = {
                "size": identity["size"],
                "mtime_ns": identity["mtime_ns"],
                **entry,
            }
            write_json_atomic(path, stored)
    except OSError as exc:
        log.info("could not remember agy's models in %s: %s", path, exc)


def cached_models(
    binary: str, *, max_age: float = CATALOG_MAX_AGE, refresh: bool = False
) -> list[AgyModel]:
    """agy's models (`agy models`, tiers folded), from the copy kept for this binary when it is
    younger than `max_age` seconds; otherwise agy is asked and the answer kept.

    Raises `SourceError` when agy lists nothing (its reason inside); that failure is itself
    remembered for five minutes, so a signed-out agy is not asked again on every call.
    """
    identity = _identity(binary)
    path = catalog_path()
    now = time.time()
    if identity is not None and not refresh:
        entry = _read_entry(path, identity)
        if entry is not None:
            age = now - float(entry.get("fetched_at", 0.0))
            failure = entry.get("error")
            if isinstance(failure, str) and failure and 0 <= age < _FAILURE_MAX_AGE:
                raise SourceError(failure)
            models = _from_json(entry.get("models"))
            if models and 0 <= age < max_age:
                return models
    try:
        models = list_models(binary)
    except SourceError as exc:
        if identity is not None:
            _write_entry(path, identity, {"fetched_at": now, "error": str(exc), "models": []})
        raise
    if identity is not None:
        _write_entry(path, identity, {"fetched_at": now, "models": _to_json(models)})
    return models


def _version(slug: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", slug))


def resolve_model(name: str, models: Sequence[AgyModel]) -> str:
    """What `--model` should get for `name`: an alias (`flash`, `pro`, `sonnet`, `opus`) becomes
    the newest model of that family agy lists; a base or a full tiered slug is checked against
    `models` and returned as it is. "" stays "" (agy's or the configured default).

    Raises `UsageError` naming the models agy offers when `name` is not among them.
    """
    name = name.strip()
    if not name:
        return ""
    offered = ", ".join(m.id for m in models) or "none"
    if name.lower() in ALIASES:
        word = name.lower()
        family = [m for m in models if word in m.id.split("-")]
        if not family:
            raise UsageError(f"agy lists no {word} model (it offers: {offered})")
        # Newest first by the version numbers in the slug; agy's own order breaks ties.
        best = max(enumerate(family), key=lambda im: (_version(im[1].id), -im[0]))[1]
        return best.id
    for model in models:
        if name == model.id:
            return name
        if name.startswith(model.id + "-") and name[len(model.id) + 1 :] in model.efforts:
            return name
    raise UsageError(
        f"agy offers no model {name!r}: use flash, pro, sonnet, opus or one of: {offered}"
    )
