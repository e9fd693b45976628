"""The JSON codec pi's types, events and options share: a field table per class, read and written.

Owns the decoding rules (`DecodeError` for a missing key or a wrong type) and number encoding.

A class lists its fields once, in pi's key order, as a `JsonShape` of `Kind`s (how a value is
read from the decoded mapping and written back); `PiJson` turns the table into `to_json` and
`from_json`. pi's key is the field's name in camelCase. Optional kinds read an absent or null key
as None and leave None out of the JSON, the way pi's `JSON.stringify` leaves out `undefined`.
Readers take the decoded mapping, the key and a `what` naming the value for the error message.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import ClassVar
from typing import NamedTuple
from typing import Self
from typing import TypeAlias
from typing import TypeVar
from typing import get_args

from agy_provider.errors import DecodeError

__all__ = [
    "BOOL",
    "DICT",
    "INT",
    "KEPT",
    "NUM",
    "OPT_BOOL",
    "OPT_DICT",
    "OPT_INT",
    "OPT_NUM",
    "OPT_STR",
    "STR",
    "JsonDict",
    "JsonShape",
    "Kind",
    "PiJson",
    "by_tag",
    "items",
    "json_object",
    "list_field",
    "literal",
    "nested",
    "present",
]

JsonDict: TypeAlias = dict[str, Any]
Reader: TypeAlias = Callable[[Mapping[str, Any], str, str], Any]
T = TypeVar("T")


def json_object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DecodeError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def present(d: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise DecodeError(f"{what}: missing {key!r}")
    return d[key]


def _checked(kind: type | tuple[type, ...], noun: str) -> Reader:
    """A reader of a required value that must be an instance of `kind` (`noun` in the error)."""
    # bool is an int subclass, but `true` is not a number in pi's JSON.
    exclude_bool = kind is not bool

    def read(d: Mapping[str, Any], key: str, what: str) -> Any:
        value = present(d, key, what)
        if isinstance(value, kind) and not (exclude_bool and isinstance(value, bool)):
            return value
        raise DecodeError(f"{what}: {key!r} must be {noun}, got {type(value).__name__}")

    return read


_num = _checked((int, float), "a number")
_list_value = _checked((list, tuple), "an array")


def _int(d: Mapping[str, Any], key: str, what: str) -> int:
    value = _num(d, key, what)
    if isinstance(value, float):
        # JavaScript has one number type, so another writer may send 12.0 for a count.
        if not value.is_integer():
            raise DecodeError(f"{what}: {key!r} must be an integer, got {value!r}")
        return int(value)
    return value  # type: ignore[no-any-return]


def list_field(d: Mapping[str, Any], key: str, what: str) -> list[Any]:
    return list(_list_value(d, key, what))


def _dict(d: Mapping[str, Any], key: str, what: str) -> JsonDict:
    return dict(json_object(present(d, key, what), f"{what}.{key}"))


def _jnum(value: Any) -> Any:
    """A number as `JSON.stringify` would write it: 3.0 becomes 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _same(value: Any) -> Any:
    return value


class Kind(NamedTuple):
    """How one field travels: `read(d, key, what)`, `write(value)`, and whether None is left out."""

    read: Reader
    write: Callable[[Any], Any] = _same
    optional: bool = False

    def or_none(self) -> Kind:
        """The same kind, optional: an absent or null key reads as None, None is not written."""
        read = self.read

        def read_optional(d: Mapping[str, Any], key: str, what: str) -> Any:
            return None if d.get(key) is None else read(d, key, what)

        return Kind(read_optional, self.write, True)


STR = Kind(_checked(str, "a string"))
BOOL = Kind(_checked(bool, "a boolean"))
NUM = Kind(_num, _jnum)
INT = Kind(_int, _jnum)
DICT = Kind(_dict, dict)
OPT_STR, OPT_BOOL, OPT_NUM, OPT_INT, OPT_DICT = (k.or_none() for k in (STR, BOOL, NUM, INT, DICT))
# Any JSON the host keeps aside (a tool result's `details`), as given.
KEPT = Kind(lambda d, key, what: d.get(key), optional=True)


def literal(allowed: Any) -> Kind:
    """A string that must be one of the `Literal` type `allowed`'s values."""
    choices = get_args(allowed)

    def read(d: Mapping[str, Any], key: str, what: str) -> Any:
        value = present(d, key, what)
        if value not in choices:
            raise DecodeError(f"{what}: {key!r} must be one of {list(choices)}, got {value!r}")
        return value

    return Kind(read)


def nested(cls: type[PiJson]) -> Kind:
    """A value of another `PiJson` class, written as its own object."""
    return Kind(lambda d, key, what: cls.from_json(present(d, key, what)), _to_json)


def _to_json(value: Any) -> Any:
    return value.to_json()


def items(read_item: Callable[[Any], Any], write_item: Callable[[Any], Any] = _to_json) -> Kind:
    """An array whose items `read_item` decodes and `write_item` encodes (`to_json` by default)."""
    return Kind(
        lambda d, key, what: [read_item(x) for x in list_field(d, key, what)],
        lambda values: [write_item(x) for x in values],
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class JsonShape:
    """A class's JSON: its fields (python name, pi key, kind) in pi's key order, and its tag.

    The fields are `fields` (a mapping) followed by the keyword arguments, in order.
    `tag` names the class attribute written first and checked on read ("type" or "role");
    `what` names the value in error messages, `tag_what` and `field_what` where pi's wording
    differs; each may say `{tag}` for the tag's value.
    """

    __slots__ = ("_reads", "_whats", "_writes", "field_what", "fields", "tag", "tag_what", "what")

    def __init__(
        self,
        what: str,
        fields: Mapping[str, Kind] | None = None,
        /,
        *,
        tag: str | None = None,
        tag_what: str | None = None,
        field_what: str | None = None,
        **more: Kind,
    ) -> None:
        self.what = what
        self.tag = tag
        self.tag_what = tag_what or what
        self.field_what = field_what or what
        named = {**(fields or {}), **more}
        self.fields = tuple((name, _camel(name), kind) for name, kind in named.items())
        # Hot paths (every event a host adapter converts, every message of a host's transcript):
        # plain tuples, no call for a value written as it is, wordings formatted once per class.
        self._writes = tuple(
            (name, key, None if kind.write is _same else kind.write, kind.optional)
            for name, key, kind in self.fields
        )
        self._reads = tuple((name, key, kind.read) for name, key, kind in self.fields)
        self._whats: dict[type, tuple[str, str, str]] = {}

    def write(self, obj: object, omit: str = "") -> JsonDict:
        tag = self.tag
        out: JsonDict = {} if tag is None else {tag: getattr(obj, tag)}
        for name, key, write, optional in self._writes:
            value = getattr(obj, name)
            if (value is None and optional) or name == omit:
                continue
            out[key] = value if write is None else write(value)
        return out

    def read(self, cls: type, data: object) -> JsonDict:
        """The keyword arguments of `cls` that `data` holds."""
        whats = self._whats.get(cls) or self._wordings(cls)
        d = json_object(data, whats[0])
        if self.tag is not None:
            tag = getattr(cls, self.tag)
            if d.get(self.tag) != tag:
                raise DecodeError(
                    f"{whats[1]}: expected {self.tag} {tag!r}, got {d.get(self.tag)!r}"
                )
        what = whats[2]
        return {name: read(d, key, what) for name, key, read in self._reads}

    def _wordings(self, cls: type) -> tuple[str, str, str]:
        tag = None if self.tag is None else getattr(cls, self.tag)
        whats = (
            self.what.format(tag=tag),
            self.tag_what.format(tag=tag),
            self.field_what.format(tag=tag),
        )
        self._whats[cls] = whats
        return whats


class PiJson:
    """`to_json` / `from_json` for a frozen dataclass that declares its `_json` shape."""

    __slots__ = ()
    _json: ClassVar[JsonShape]

    def to_json(self) -> JsonDict:
        """pi's JSON for this value."""
        return self._json.write(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """Decode pi's JSON. Raises `DecodeError` when a key pi requires is missing or wrong."""
        return cls(**cls._json.read(cls, data))


def by_tag(
    data: Mapping[str, Any], what: str, key: str, decoders: Mapping[Any, Callable[[Any], T]]
) -> T:
    """Decode `data` with the decoder its `key` names; `DecodeError` for an unknown one."""
    d = json_object(data, what)
    decode = decoders.get(d.get(key))
    if decode is None:
        raise DecodeError(f"{what}: unknown {key} {d.get(key)!r}")
    return decode(d)
