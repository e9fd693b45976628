"""Persisted settings (mode, permissions, default model and thinking, event source, timeouts).

Read per turn: environment variables override the file; `save_config` writes atomically.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agy_provider.errors import UsageError
from agy_provider.store.atomic import file_lock
from agy_provider.store.atomic import read_json
from agy_provider.store.atomic import write_json_atomic

__all__ = [
    "CONFIG_ENV",
    "ENV_OVERRIDES",
    "MAX_TIMEOUT",
    "Config",
    "config_path",
    "load_config",
    "save_config",
    "set_config_value",
]

log = logging.getLogger(__name__)

CONFIG_ENV = "AGY_PROVIDER_CONFIG"

_CHOICES: Mapping[str, tuple[str, ...]] = {
    "mode": ("default", "accept-edits", "plan"),
    "permissions": ("ask", "skip"),
    "thinking": ("", "low", "medium", "high"),
    "event_source": ("auto", "rpc", "sqlite", "stream-json"),
}

# Timeouts in seconds must be finite and positive; the bound keeps agy's --print-timeout (a Go
# duration our deadline plus a margin) far from overflow and catches minutes typed as milliseconds.
MAX_TIMEOUT = 7 * 24 * 3600.0
_TIMEOUTS = (
    "turn_timeout",
    "idle_timeout",
    "host_tool_timeout",
    "warm_idle_timeout",
    "start_timeout",
)
# Counts of warm agy processes: each is a whole agy (~330 MB of memory for the real one), so the
# bound is small; 1,000 catches a typo without limiting a machine that can hold that many.
_COUNTS: Mapping[str, tuple[int, int]] = {
    "warm_max": (1, 1000),
    "warm_spares": (0, 1000),
    "cold_starts": (0, 1000),
}

# Environment variable -> setting. Set variables win over the file, for this process only.
ENV_OVERRIDES: Mapping[str, str] = {
    "AGY_BIN": "agy_bin",
    "AGY_MODE": "mode",
    "AGY_PERMISSIONS": "permissions",
    "AGY_MODEL": "model",
    "AGY_THINKING": "thinking",
    "AGY_EVENT_SOURCE": "event_source",
    "AGY_TURN_TIMEOUT": "turn_timeout",
    "AGY_IDLE_TIMEOUT": "idle_timeout",
    "AGY_START_TIMEOUT": "start_timeout",
    "AGY_HOST_TOOL_TIMEOUT": "host_tool_timeout",
    "AGY_APP_DATA_DIR": "app_data_dir",
    "AGY_CSRF": "csrf",
    "AGY_PAGED_REPLAY": "paged_replay",
    "AGY_WARM": "warm",
    "AGY_WARM_IDLE_TIMEOUT": "warm_idle_timeout",
    "AGY_WARM_MAX": "warm_max",
    "AGY_WARM_SPARES": "warm_spares",
    "AGY_COLD_STARTS": "cold_starts",
    "AGY_SERVE_MODEL_MAP": "serve_model_map",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """Settings for a turn. Timeouts are seconds; `idle_timeout` is the no-progress deadline;
    `host_tool_timeout` bounds how long agy waits for the host to answer a call to its tools."""

    mode: str = "default"
    permissions: str = "ask"
    model: str = ""
    thinking: str = ""
    event_source: str = "auto"
    turn_timeout: float = 600.0
    idle_timeout: float = 180.0
    host_tool_timeout: float = 600.0
    # The start deadline: agy must start the turn (a warm agy's `init`; `agy -p`'s first step)
    # within this many seconds, else it is ended and the turn falls back once to `agy -p` or fails saying
    # what agy printed (`live/start_deadline.py`). Real agy prints `init` 2.3–2.8 s after spawn
    # (AGY-FORMATS §2.4) and fifty starting at once on two cores gave first text in 9–12 s:
    # 30 s is ten times a start and three times that crowd, and a twentieth of `turn_timeout`.
    # At or above `turn_timeout` it is off (the turn deadline bounds the start, as before).
    start_timeout: float = 30.0
    agy_bin: str = ""
    app_data_dir: str = ""
    csrf: bool = True
    # Ask agy's update stream to replay only the steps after a resumed session's last index
    # (`initialStepsPageBounds`, a field of agy's own request schema; unverified that agy
    # honours it, hence the switch). Either way a large replay is not parsed.
    paged_replay: bool = True
    # The warm pool (AGY-FORMATS §2.4, `live/warm/pool.py`): one agy kept running per conversation
    # and settings, each turn a stdin line; a warm agy idle this many seconds is ended; at most
    # `warm_max` of them (spares included), and `warm_spares` started ahead for new conversations.
    warm: bool = True
    warm_idle_timeout: float = 600.0
    warm_max: int = 4
    warm_spares: int = 1
    # How many agys may be starting at once (spawned, no `init` yet: `live/admission.py`); turns
    # beyond it wait in a first-come queue. 0: one per CPU this process may run on.
    cold_starts: int = 0
    # `serve`'s model map: comma-separated `PATTERN=MODEL` entries tried before its defaults
    # (`hosts/serve/models.py`); `*=none` switches the fallback to `default` off.
    serve_model_map: str = ""

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                shown = " | ".join(a or '""' for a in allowed)
                raise UsageError(
                    f"config: {name} must be one of {shown}, not {getattr(self, name)!r}"
                )
        for name in _TIMEOUTS:
            _check_timeout(name, getattr(self, name))
        for name, (low, high) in _COUNTS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise UsageError(
                    f"config: {name} must be a whole number from {low} to {high}, not {value!r}"
                )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def config_path() -> Path:
    """`$AGY_PROVIDER_CONFIG`, else `$XDG_CONFIG_HOME/agy-provider/config.json`."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "agy-provider" / "config.json"


_ENV_OF = {name: variable for variable, name in ENV_OVERRIDES.items()}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}


def _check_timeout(name: str, value: float, origin: str = "") -> None:
    """Refuse nan, inf, zero, negative and absurdly long timeouts, naming the key and the range."""
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        where = f" (from {origin})" if origin else ""
        raise UsageError(
            f"config: {name} must be a number of seconds greater than 0 and at most "
            f"{MAX_TIMEOUT:.0f} (7 days), not {value!r}{where}; set it in the config file or "
            f"with {_ENV_OF[name]} (the default is {_DEFAULTS[name]:.0f})"
        )


def _coerce(name: str, value: Any, origin: str) -> Any:
    field_type = {f.name: f.type for f in dataclasses.fields(Config)}[name]
    if field_type == "float":
        try:
            if isinstance(value, bool):  # JSON true is not a number of seconds
                raise TypeError(value)
            number = float(value)
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"config: {name} must be a number, not {value!r} (from {origin})"
            ) from exc
        if name in _TIMEOUTS:
            _check_timeout(name, number, origin)
        return number
    if field_type == "int":
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError(value)
            return int(value)
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"config: {name} must be a whole number, not {value!r} (from {origin})"
            ) from exc
    if field_type == "bool":
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    return str(value)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The file's settings (unknown keys ignored with a warning), then environment overrides."""
    path = path or config_path()
    env = os.environ if env is None else env
    try:
        data = read_json(path) or {}
    except ValueError as exc:
        raise UsageError(
            f"config file {path} is not valid JSON: {exc}; fix it, delete it to use the defaults, "
            f"or point {CONFIG_ENV} at another file"
        ) from exc
    except OSError as exc:
        raise UsageError(
            f"could not read the config file {path}: {exc.strerror or exc}; fix its permissions "
            f"or point {CONFIG_ENV} at another file"
        ) from exc
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a JSON object")
    known = {f.name for f in dataclasses.fields(Config)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in known:
            values[key] = _coerce(key, value, f"the config file {path}")
        else:
            log.warning("config file %s: unknown setting %r ignored", path, key)
    for variable, name in ENV_OVERRIDES.items():
        if env.get(variable):
            values[name] = _coerce(name, env[variable], variable)
    return Config(**values)


def save_config(config: Config, path: Path | None = None) -> Path:
    """Write `config` atomically; returns the path written."""
    path = path or config_path()
    with file_lock(path):
        write_json_atomic(path, config.to_json())
    return path


def set_config_value(key: str, value: str | None, path: Path | None = None) -> Config:
    """Set one setting in the config file (None removes it: the default applies again).

    The value is checked as a turn would read it; environment overrides are neither applied nor
    written. Raises `UsageError` naming the key and what it accepts. Returns the file's settings.
    """
    path = path or config_path()
    known = {f.name for f in dataclasses.fields(Config)}
    if key not in known:
        raise UsageError(f"config: no setting {key!r}; settings: {', '.join(sorted(known))}")
    with file_lock(path):
        current = load_config(path, env={})
        values = {k: v for k, v in current.to_json().items() if v != _DEFAULTS[k]}
        if value is None:
            values.pop(key, None)
        else:
            values[key] = _coerce(key, value, "the command line")
        updated = Config(**values)
        write_json_atomic(path, {k: v for k, v in updated.to_json().items() if k in values})
    return updated
