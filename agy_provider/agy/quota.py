"""agy's quota: Go durations, quota refusals in a result error or on stderr, `/usage` buckets.

Owns the words agy uses when it refuses a turn for quota and the body of `agy -p /usage`; pure.

What agy says (AGY-FORMATS §2.2, §2.3): a stream-json `result` ERROR whose `error` reads
`Individual quota reached. … Resets in 120h9m43s.`, or exit code 3 with the stderr line
`AGY_ERROR: RESOURCE_EXHAUSTED (code 429): Individual quota reached … Resets in 3h20m`. The reset
is a Go `time.Duration` (`120h9m43s`, `3h20m`, `1.5h`, `250ms`) counted from when agy said it.

`/usage` (`agy -p /usage --output-format json`) answers with `command{name, data}`; the shape of
`data` is **unverified** (no real capture). `parse_usage` accepts, defensively: a list of bucket
objects; an object holding such a list under `buckets`, `quotas`, `limits`, `usage` or
`models`; an object mapping a window's name to a bucket object or to a remaining fraction; or
plain text, one bucket a line (`Weekly: 40% remaining, resets in 3h20m`). A bucket object names
its window by `window`, `name`, `label`, `bucket`, `id` or `model`; its remaining share by a
fraction (`remaining_fraction`, `remainingFraction`, `fraction_remaining`, `remaining`) or a
percentage (`remaining_percent`, `percent_remaining`, `remainingPercent`), or as used
(`used_fraction`, `usedFraction`, `used_percent`, `usedPercent`: remaining = 1 − used); its reset
by a time (`reset_time`, `resetTime`, `resets_at`, `resetsAt`, `reset_at`: RFC 3339 text or epoch
seconds) or a delay (`resets_in`, `resetsIn`, `reset_in`: a Go duration or seconds). A value of
100 or less given as a `remaining` of more than 1 is read as a percentage. Anything else is
skipped; nothing here raises but `DecodeError` from `parse_go_duration`.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import Protocol

from agy_provider.errors import DecodeError
from agy_provider.errors import QuotaExceededError
from agy_provider.wire import jsontext

__all__ = [
    "QuotaInfo",
    "UsageBucket",
    "is_quota_text",
    "parse_go_duration",
    "parse_usage",
    "quota_error",
    "quota_from_text",
    "quota_of",
]

# A Go duration agy prints is a handful of characters; a longer one is not agy's.
_MAX_DURATION_CHARS: Final = 64
# Texts we search for quota wording: agy's error lines are short; a hostile one must not cost.
_MAX_TEXT_CHARS: Final = 64 * 1024
# No bucket list agy shows has more than a few windows per model; more is not a usage body.
_MAX_BUCKETS: Final = 256

_UNITS: Final[Mapping[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5 micro sign, as Go prints it
    "μs": 1e-6,  # U+03BC Greek mu, which Go also accepts
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_QUOTA_WORDS: Final = (
    "individual quota reached",
    "quota reached",
    "quota exceeded",
    "resource_exhausted",
    "resource has been exhausted",
    "ai credits balance is too low",
    "exhausted your capacity",
    "code 429",
)
_GO_UNIT: Final = "(?:ns|us|µs|μs|ms|s|m|h)"
_RESETS_IN: Final = re.compile(
    rf"resets?\s+(?:in|after)\s+([0-9][0-9.]*{_GO_UNIT}(?:[0-9.]+{_GO_UNIT})*)", re.IGNORECASE
)
_CODE: Final = re.compile(r"\b([A-Z][A-Z_]{3,})\s*\(code\s*([0-9]{3})\)")
_PERCENT: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*%\s*(remaining|left|used)?", re.IGNORECASE)


def parse_go_duration(text: str) -> float:
    """A Go `time.Duration` string (`120h9m43s`, `3h20m`, `1.5h`, `-2m`, `0`) → seconds.

    Raises:
        DecodeError: not a Go duration (empty, an unknown unit, a number without a unit).
    """
    if not isinstance(text, str) or len(text) > _MAX_DURATION_CHARS:
        raise DecodeError("not a Go duration (too long or not text)")
    body = text.strip()
    sign = 1.0
    if body[:1] in ("-", "+"):
        sign, body = (-1.0 if body[0] == "-" else 1.0), body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise DecodeError("not a Go duration: empty")
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _DURATION.match(body, pos)
        if match is None or match.group(1) in ("", "."):
            raise DecodeError(f"not a Go duration: {text[:40]!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not math.isfinite(total):
        raise DecodeError("Go duration out of range")
    return sign * total


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaInfo:
    """A turn refused for quota: agy's own words and when the quota resets, when it said so.

    `resets_in` is seconds from `observed_at` (epoch seconds, when known); `resets_at` is
    `observed_at + resets_in` (None unless both are known). `code` is agy's status name
    (`RESOURCE_EXHAUSTED`) when it gave one.
    """

    message: str
    resets_in: float | None = None
    resets_at: float | None = None
    observed_at: float | None = None
    code: str = ""

    def error(self) -> QuotaExceededError:
        """The typed error a host can catch (`QuotaExceededError`) for this refusal."""
        return QuotaExceededError(
            self.message, resets_in=self.resets_in, resets_at=self.resets_at, code=self.code
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "resetsIn": self.resets_in,
            "resetsAt": self.resets_at,
            "code": self.code,
        }


def is_quota_text(text: str) -> bool:
    """True when `text` (a result error, a stderr line) is agy refusing for quota."""
    if not isinstance(text, str):
        return False
    lowered = text[:_MAX_TEXT_CHARS].lower()
    return any(word in lowered for word in _QUOTA_WORDS)


def quota_from_text(text: str, *, observed_at: float | None = None) -> QuotaInfo | None:
    """The quota refusal `text` states (agy's words kept whole), or None when it is not one.

    `observed_at` (epoch seconds: when agy said it) turns `Resets in …` into `resets_at`.
    """
    if not is_quota_text(text):
        return None
    text = text[:_MAX_TEXT_CHARS]
    resets_in: float | None = None
    match = _RESETS_IN.search(text)
    if match is not None:
        try:
            resets_in = max(0.0, parse_go_duration(match.group(1).rstrip(".")))
        except DecodeError:
            resets_in = None
    code = _CODE.search(text)
    resets_at = (
        observed_at + resets_in
        if observed_at is not None and resets_in is not None and math.isfinite(observed_at)
        else None
    )
    return QuotaInfo(
        message=text.strip(),
        resets_in=resets_in,
        resets_at=resets_at,
        observed_at=observed_at,
        code=code.group(1) if code else "",
    )


class _Message(Protocol):
    """What `quota_of` reads from a pi `AssistantMessage` (duck-typed: no import of pi's types)."""

    @property
    def stop_reason(self) -> str: ...

    @property
    def error_message(self) -> str | None: ...

    @property
    def timestamp(self) -> int: ...


def quota_of(message: _Message) -> QuotaInfo | None:
    """The quota refusal a failed turn's final message carries, else None.

    Reads the message's `error_message` (agy's own words, kept by the turn); `resets_at` is
    counted from the message's `timestamp` (pi's Unix milliseconds; 0, as in a replay, leaves
    it None). An aborted or successful message is never a quota refusal.
    """
    if message.stop_reason != "error" or not message.error_message:
        return None
    stamp = message.timestamp / 1000 if message.timestamp else None
    return quota_from_text(message.error_message, observed_at=stamp)


def quota_error(message: _Message) -> QuotaExceededError | None:
    """`quota_of(message)` as the typed error a host can raise or catch, else None."""
    info = quota_of(message)
    return info.error() if info is not None else None


# -- /usage ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class UsageBucket:
    """One quota window of `/usage`: its name, the share left (0–1) and when it resets."""

    window: str
    remaining: float | None = None
    resets_at: float | None = None
    resets_in: float | None = None

    def describe(self) -> str:
        """`62% left, resets 2026-12-01 23:36 UTC (in 3h20m)`: the bucket for a person."""
        parts = []
        if self.remaining is not None:
            parts.append(f"{self.remaining * 100:.0f}% left")
        when = ""
        if self.resets_at is not None:
            try:
                at = datetime.datetime.fromtimestamp(self.resets_at, datetime.UTC)
                when = f"resets {at:%Y-%m-%d %H:%M} UTC"
            except (OverflowError, OSError, ValueError):
                when = ""
        if self.resets_in is not None:
            span = _span(self.resets_in)
            when = f"{when} (in {span})" if when else f"resets in {span}"
        if when:
            parts.append(when)
        return ", ".join(parts) or "no details"

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "remaining": self.remaining,
            "resetsAt": self.resets_at,
            "resetsIn": self.resets_in,
        }


def _span(seconds: float) -> str:
    """Seconds as agy says them, coarsely: `4d7h`, `3h20m`, `5m0s`."""
    total = int(max(0.0, min(seconds, 1e12)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s"


_NAME_KEYS: Final = ("window", "name", "label", "bucket", "id", "model", "title")
_LIST_KEYS: Final = ("buckets", "quotas", "limits", "usage", "models", "windows")
_FRACTION_KEYS: Final = (
    "remaining_fraction",
    "remainingFraction",
    "fraction_remaining",
    "remaining",
)
_PERCENT_KEYS: Final = ("remaining_percent", "percent_remaining", "remainingPercent")
_USED_FRACTION_KEYS: Final = ("used_fraction", "usedFraction")
_USED_PERCENT_KEYS: Final = ("used_percent", "usedPercent")
_AT_KEYS: Final = ("reset_time", "resetTime", "resets_at", "resetsAt", "reset_at", "resetAt")
_IN_KEYS: Final = ("resets_in", "resetsIn", "reset_in", "resetIn")


def _fraction(value: Any, *, percent: bool = False) -> float | None:
    number = jsontext.finite_number(value)
    if number is None and isinstance(value, str):
        match = _PERCENT.fullmatch(value.strip()[:40])
        if match is not None:
            number, percent = float(match.group(1)), True
        else:
            try:
                number = jsontext.finite_number(float(value.strip()[:40]))
            except ValueError:
                return None
    if number is None or number < 0:
        return None
    if percent or number > 1:
        if number > 100:
            return None
        number /= 100
    return number


def _time(value: Any) -> float | None:
    number = jsontext.finite_number(value)
    if number is not None:
        return number / 1000 if number > 1e11 else number  # epoch ms, else epoch seconds
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _delay(value: Any) -> float | None:
    number = jsontext.finite_number(value)
    if number is not None:
        return max(0.0, number)
    if isinstance(value, str):
        try:
            return max(0.0, parse_go_duration(value.strip()))
        except DecodeError:
            return None
    return None


def _first(body: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in body and body[key] is not None:
            return body[key]
    return None


def _bucket(body: Mapping[str, Any], name: str, now: float | None) -> UsageBucket | None:
    window = _first(body, _NAME_KEYS)
    window = window if isinstance(window, str) and window else name
    remaining = _fraction(_first(body, _FRACTION_KEYS))
    if remaining is None:
        remaining = _fraction(_first(body, _PERCENT_KEYS), percent=True)
    if remaining is None:
        used = _fraction(_first(body, _USED_FRACTION_KEYS))
        if used is None:
            used = _fraction(_first(body, _USED_PERCENT_KEYS), percent=True)
        remaining = None if used is None else max(0.0, 1.0 - used)
    resets_at = _time(_first(body, _AT_KEYS))
    resets_in = _delay(_first(body, _IN_KEYS))
    if resets_at is None and resets_in is not None and now is not None:
        resets_at = now + resets_in
    if resets_in is None and resets_at is not None and now is not None:
        resets_in = max(0.0, resets_at - now)
    if not window or (remaining is None and resets_at is None and resets_in is None):
        return None
    return UsageBucket(jsontext.clean_text(window[:200]), remaining, resets_at, resets_in)


def _text_buckets(text: str, now: float | None) -> list[UsageBucket]:
    buckets: list[UsageBucket] = []
    for line in text[:_MAX_TEXT_CHARS].splitlines():
        name, sep, rest = line.partition(":")
        if not sep or not name.strip():
            continue
        percent = _PERCENT.search(rest)
        remaining: float | None = None
        if percent is not None:
            remaining = _fraction(percent.group(1), percent=True)
            if remaining is not None and (percent.group(2) or "").lower() == "used":
                remaining = max(0.0, 1.0 - remaining)
        resets = _RESETS_IN.search(rest)
        resets_in = None
        if resets is not None:
            resets_in = _delay(resets.group(1).rstrip("."))
        if remaining is None and resets_in is None:
            continue
        resets_at = now + resets_in if now is not None and resets_in is not None else None
        buckets.append(UsageBucket(name.strip()[:200], remaining, resets_at, resets_in))
    return buckets


def parse_usage(data: Any, *, now: float | None = None) -> list[UsageBucket]:
    """`/usage`'s `command.data` → its quota windows (see the module docstring for the shapes).

    `now` (epoch seconds) converts between a reset time and a reset delay. Never raises;
    whatever is not a bucket is left out.
    """
    return _parse_usage(data, now, 0)[:_MAX_BUCKETS]


# `{"usage": {"buckets": [...]}}` is two levels; a body nested deeper is not a usage body.
_MAX_NESTING: Final = 4


def _parse_usage(data: Any, now: float | None, depth: int) -> list[UsageBucket]:
    if isinstance(data, str):
        return _text_buckets(data, now)
    items: list[tuple[str, Any]] = []
    if isinstance(data, list):
        items = [("", item) for item in data[:_MAX_BUCKETS]]
    elif isinstance(data, Mapping):
        nested = next(
            (data[k] for k in _LIST_KEYS if isinstance(data.get(k), list | Mapping)), None
        )
        if nested is not None:
            return _parse_usage(nested, now, depth + 1) if depth < _MAX_NESTING else []
        if _first(data, _NAME_KEYS) is not None and _bucket(data, "", now) is not None:
            items = [("", data)]
        else:
            items = [(str(k), v) for k, v in list(data.items())[:_MAX_BUCKETS]]
    buckets: list[UsageBucket] = []
    for name, item in items:
        if isinstance(item, Mapping):
            bucket = _bucket(item, name, now)
        elif name and (fraction := _fraction(item)) is not None:
            bucket = UsageBucket(jsontext.clean_text(name[:200]), fraction)
        else:
            bucket = None
        if bucket is not None:
            buckets.append(bucket)
    return buckets
