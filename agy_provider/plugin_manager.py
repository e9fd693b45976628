"""The plugin manager: hookspecs, built-in plugins, installed entry points, and the registries.

Built-ins are ordinary plugins registered with the same public `hookimpl` third parties use.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy

from agy_provider import hookspecs
from agy_provider.errors import UsageError

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
)

_pm = pluggy.PluginManager("agy_provider")
_pm.add_hookspecs(hookspecs)
_lock = threading.Lock()
_loaded = False


@dataclass(frozen=True, slots=True)
class EventSourceSpec:
    """A registered event source: its name, the factory that makes one per turn, who gave it."""

    name: str
    factory: Callable[..., Any]
    plugin: str


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with plugins loaded."""
    load_plugins()
    return _pm


def load_plugins() -> None:
    """Register the built-ins, then installed entry points (idempotent).

    Entry points are skipped under tests (as `llm` does) unless the environment names them.
    """
    global _loaded
    with _lock:
        if _loaded:
            return
        for name in DEFAULT_PLUGINS:
            module = importlib.import_module(name)
            if not _pm.is_registered(module):
                _pm.register(module, name=name)
        wanted = os.environ.get(PLUGINS_ENV)
        if wanted is None and not hasattr(sys, "_called_from_test"):
            _pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        elif wanted:
            names = {n.strip() for n in wanted.split(",") if n.strip()}
            for name in sorted(names):
                _pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=name)
        _loaded = True


def event_sources() -> Mapping[str, EventSourceSpec]:
    """Every event source plugins registered, by name. Duplicate names are a plugin error."""
    pm = get_plugin_manager()
    found: dict[str, EventSourceSpec] = {}
    for impl in pm.hook.register_event_sources.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(name: str, factory: Callable[..., Any], _plugin: str = plugin_name) -> None:
            if not name or not callable(factory):
                raise UsageError(f"plugin {_plugin} registered an invalid event source {name!r}")
            if name in found:
                raise UsageError(
                    f"event source {name!r} registered twice ({found[name].plugin} and {_plugin})"
                )
            found[name] = EventSourceSpec(name=name, factory=factory, plugin=_plugin)

        impl.function(register=register)
    return found
