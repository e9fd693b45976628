"""The plugin manager: hookspecs, built-in plugins, installed entry points, and the registries.

Built-ins are ordinary plugins registered with the same public `hookimpl` third parties use. The
manager is built once per process and plugins are loaded into it once, on first use.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pluggy

from agy_provider import hookspecs
from agy_provider.errors import UsageError

if TYPE_CHECKING:  # the contract's types only: the manager's import stays light
    from agy_provider.contract.sources import EventSourceFactory

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PLUGINS_ENV",
    "EventSourceSpec",
    "event_sources",
    "get_plugin_manager",
    "load_plugins",
]

ENTRY_POINT_GROUP = "agy_provider"
# Comma-separated names of installed plugins to load; unset loads every installed one, "" none.
PLUGINS_ENV = "AGY_PROVIDER_PLUGINS"

# Built-in plugins, registered like third-party ones.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "agy_provider.plugins.defaults",
    "agy_provider.plugins.sqlite_source",
    "agy_provider.plugins.rpc_source",
    "agy_provider.plugins.streamjson_source",
)

log = logging.getLogger(__name__)

_pm = pluggy.PluginManager("agy_provider")
_pm.add_hookspecs(hookspecs)
_lock = threading.Lock()
_loaded = False


@dataclass(frozen=True, slots=True)
class EventSourceSpec:
    """A registered event source: its name, the factory that makes one per turn, who gave it,
    and what it reads: agy's database (the ground truth other sources fall back to), agy's
    language server (agy is then asked to log its ports, and given a CSRF token), or agy's
    stream-json stdout (`stdout`: it needs neither, so it serves when they fail, and it is
    complete once agy's stdout ends, so it has its turn's last word itself)."""

    name: str
    factory: EventSourceFactory
    plugin: str
    database: bool = False
    language_server: bool = False
    stdout: bool = False


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with plugins loaded."""
    load_plugins()
    return _pm


def load_plugins() -> None:
    """Register the built-ins, then installed entry points: once per process (idempotent).

    Entry points are skipped under tests (as `llm` does) unless the environment names them. The
    installed distributions are scanned once, whatever the allow-list holds; a plugin that fails
    to load is skipped with a warning naming it, so one broken install cannot stop every turn.
    """
    global _loaded
    if _loaded:  # the common case, without the lock
        return
    with _lock:
        if _loaded:
            return
        for name in DEFAULT_PLUGINS:
            module = importlib.import_module(name)
            if not _pm.is_registered(module):
                _pm.register(module, name=name)
        wanted = os.environ.get(PLUGINS_ENV)
        if wanted is None and hasattr(sys, "_called_from_test"):
            wanted = ""
        if wanted != "":
            names = None if wanted is None else {n.strip() for n in wanted.split(",") if n.strip()}
            _load_entry_points(names)
        _loaded = True


def _load_entry_points(names: set[str] | None) -> None:
    """Register the installed plugins of our entry-point group (only `names`, when given)."""
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if names is not None and entry.name not in names:
            continue
        if _pm.get_plugin(entry.name) is not None or _pm.is_blocked(entry.name):
            continue
        try:
            plugin = entry.load()
            _pm.register(plugin, name=entry.name)
        except Exception as exc:  # a third party's import or registration error
            log.warning(
                "plugin %r (%s) could not be loaded and is skipped: %s: %s. Reinstall or remove "
                "it, or list the plugins you want in %s",
                entry.name,
                entry.value,
                type(exc).__name__,
                exc,
                PLUGINS_ENV,
            )


def event_sources() -> Mapping[str, EventSourceSpec]:
    """Every event source plugins registered, by name. Duplicate names are a plugin error."""
    pm = get_plugin_manager()
    found: dict[str, EventSourceSpec] = {}
    for impl in pm.hook.register_event_sources.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(
            name: str,
            factory: EventSourceFactory,
            *,
            database: bool = False,
            language_server: bool = False,
            stdout: bool = False,
            _plugin: str = plugin_name,
        ) -> None:
            if not name or not callable(factory):
                raise UsageError(f"plugin {_plugin} registered an invalid event source {name!r}")
            if name in found:
                raise UsageError(
                    f"event source {name!r} registered twice ({found[name].plugin} and {_plugin})"
                )
            found[name] = EventSourceSpec(
                name=name,
                factory=factory,
                plugin=_plugin,
                database=database,
                language_server=language_server,
                stdout=stdout,
            )

        impl.function(register=register)
    return found
