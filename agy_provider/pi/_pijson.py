"""The JSON helpers pi's types, events and options share: checked reads and pi-style writes.

Owns the decoding rules (`DecodeError` for a missing key or a wrong type) and number encoding.

Readers take the decoded mapping, the key and a `what` naming the value for the error message;
`_opt_*` readers return None for an absent or null key. Writers leave out None the way pi's
`JSON.stringify` leaves out `undefined`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias, get_args

from agy_provider.errors import DecodeError

__all__ = [
    "JsonDict",
    "_bool",
    "_dict",
    "_int",
    "_jnum",
    "_list",
    "_literal",
    "_num",
    "_obj",
    "_opt_bool",
    "_opt_dict",
    "_opt_int",
    "_opt_literal",
    "_opt_num",
    "_opt_str",
    "_present",
    "_put",
    "_str",
    "_tag",
]

JsonDict: TypeAlias = dict[str, Any]


def _obj(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DecodeError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _present(d: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise DecodeError(f"{what}: missing {key!r}")
    return d[key]


def _str(d: Mapping[str, Any], key: str, what: str) -> str:
    value = _present(d, key, what)
    if not isinstance(value, str):
        raise DecodeError(f"{what}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _opt_str(d: Mapping[str, Any], key: str, what: str) -> str | None:
    return None if d.get(key) is None else _str(d, key, what)


def _bool(d: Mapping[str, Any], key: str, what: str) -> bool:
    value = _present(d, key, what)
    if not isinstance(value, bool):
        raise DecodeError(f"{what}: {key!r} must be a boolean, got {type(value).__name__}")
    return value


def _opt_bool(d: Mapping[str, Any], key: str, what: str) -> bool | None:
    return None if d.get(key) is None else _bool(d, key, what)


def _num(d: Mapping[str, Any], key: str, what: str) -> float:
    value = _present(d, key, what)
    # bool is an int subclass, but `true` is not a number in pi's JSON.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DecodeError(f"{what}: {key!r} must be a number, got {type(value).__name__}")
    return value


def _opt_num(d: Mapping[str, Any], key: str, what: str) -> float | None:
    return None if d.get(key) is None else _num(d, key, what)


def _int(d: Mapping[str, Any], key: str, what: str) -> int:
    value = _num(d, key, what)
    if isinstance(value, float):
        # JavaScript has one number type, so another writer may send 12.0 for a count.
        if not value.is_integer():
            raise DecodeError(f"{what}: {key!r} must be an integer, got {value!r}")
        return int(value)
    return value


def _opt_int(d: Mapping[str, Any], key: str, what: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, what)


def _list(d: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = _present(d, key, what)
    if not isinstance(value, list | tuple):
        raise DecodeError(f"{what}: {key!r} must be an array, got {type(value).__name__}")
    return list(value)


def _dict(d: Mapping[str, Any], key: str, what: str) -> JsonDict:
    return dict(_obj(_present(d, key, what), f"{what}.{key}"))


def _opt_dict(d: Mapping[str, Any], key: str, what: str) -> JsonDict | None:
    return None if d.get(key) is None else _dict(d, key, what)


def _literal(d: Mapping[str, Any], key: str, what: str, allowed: Any) -> Any:
    value = _present(d, key, what)
    choices = get_args(allowed)
    if value not in choices:
        raise DecodeError(f"{what}: {key!r} must be one of {list(choices)}, got {value!r}")
    return value


def _opt_literal(d: Mapping[str, Any], key: str, what: str, allowed: Any) -> Any:
    return None if d.get(key) is None else _literal(d, key, what, allowed)


def _tag(d: Mapping[str, Any], key: str, expected: str, what: str) -> None:
    if d.get(key) != expected:
        raise DecodeError(f"{what}: expected {key} {expected!r}, got {d.get(key)!r}")


def _jnum(value: float) -> float:
    """A number as `JSON.stringify` would write it: 3.0 becomes 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _put(out: JsonDict, key: str, value: object) -> None:
    if value is not None:
        out[key] = value
