"""What an event says: each event type's data, declared as a frozen dataclass next to its type.

A watcher builds the payload of the event it saw (``Step(step=39, rank=0)``), the
timeline writes it as the event's ``data`` object, and a reader gets the same
class back (``e.data.step``), so writer and reader share one declaration and a
type checker sees every field. Reading is validation: a JSON object becomes a
payload only when every declared field has its declared type (JSON lists become
tuples, an integer stands for a float); otherwise :class:`PayloadError` names the
field, what it must be and what it was. Fields a type does not declare (a newer
toolkit's, a script's own ``elastic_chaos.trainer.progress`` fields) are kept in ``extra``,
read as they are and written back unchanged.

Annotations a payload field may use: ``int``, ``float``, ``str``, ``bool``,
``Any``, ``X | None``, ``X | Y`` of those, ``tuple[X, ...]``,
``tuple[X, Y]``, ``Mapping[str, X]`` and another payload class.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

P = TypeVar("P", bound="Payload")


class PayloadError(ValueError):
    """A field of an event's data does not have the type its payload declares."""

    def __init__(self, what: str, name: str, expected: str, got: Any) -> None:
        shown = repr(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        super().__init__(f"{what}: field {name!r} must be {expected}, not {shown}")
        self.field = name


@dataclass(frozen=True, kw_only=True)
class Payload:
    """The base of every payload: what its type declares, plus ``extra``."""

    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields the type does not declare, kept as read (written back unchanged)."""

    @classmethod
    def read(cls: type[P], raw: Mapping[str, Any]) -> P:
        """``raw`` (declared fields and a platform's or script's own detail) as this payload:
        declared fields checked, the rest kept in ``extra``; PayloadError for a wrong type."""
        return read_payload(cls, raw, what=cls.__name__)


@dataclass(frozen=True, kw_only=True)
class Nothing(Payload):
    """The data of an event that says nothing beyond its type, node and time."""


@dataclass(frozen=True, kw_only=True)
class Undeclared(Payload):
    """The data of an event type the vocabulary does not declare (a script's own
    ``elastic_chaos.trainer.progress`` event, a newer toolkit's): every field is in ``extra``."""


Convert = Callable[[Any, str], Any]
"""A field's reader: (JSON value, what is read) -> the value, or PayloadError."""


class _Mismatch(Exception):
    """A value is not of the expected shape (turned into a PayloadError with the field's name)."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _int(v: Any, what: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise _Mismatch("an integer")


def _float(v: Any, what: str) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    raise _Mismatch("a finite number")


def _str(v: Any, what: str) -> str:
    if isinstance(v, str):
        return v
    raise _Mismatch("a string")


def _bool(v: Any, what: str) -> bool:
    if isinstance(v, bool):
        return v
    raise _Mismatch("true or false")


def _any(v: Any, what: str) -> Any:
    return v


_SCALARS: dict[Any, tuple[Convert, str]] = {int: (_int, "an integer"), float: (_float, "a finite number"),
                                            str: (_str, "a string"), bool: (_bool, "true or false"),
                                            Any: (_any, "anything")}


def _union(options: list[tuple[Convert, str]], nullable: bool) -> tuple[Convert, str]:
    names = [n for _, n in options] + (["null"] if nullable else [])
    expected = " or ".join(names)

    def read(v: Any, what: str) -> Any:
        if v is None and nullable:
            return None
        for convert, _ in options:
            try:
                return convert(v, what)
            except _Mismatch:
                continue
        raise _Mismatch(expected)

    return read, expected


def _tuple_of(item: tuple[Convert, str]) -> tuple[Convert, str]:
    convert, name = item
    expected = f"a list, each {name}"

    def read(v: Any, what: str) -> tuple[Any, ...]:
        if not isinstance(v, (list, tuple)):
            raise _Mismatch(expected)
        try:
            return tuple(convert(x, what) for x in v)
        except _Mismatch:
            raise _Mismatch(expected) from None

    return read, expected


def _fixed_tuple(items: list[tuple[Convert, str]]) -> tuple[Convert, str]:
    expected = f"a list of {len(items)}: " + ", ".join(n for _, n in items)

    def read(v: Any, what: str) -> tuple[Any, ...]:
        if not isinstance(v, (list, tuple)) or len(v) != len(items):
            raise _Mismatch(expected)
        try:
            return tuple(c(x, what) for (c, _), x in zip(items, v, strict=True))
        except _Mismatch:
            raise _Mismatch(expected) from None

    return read, expected


def _mapping_of(value: tuple[Convert, str]) -> tuple[Convert, str]:
    convert, name = value
    expected = f"an object of {name}"

    def read(v: Any, what: str) -> dict[str, Any]:
        if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
            raise _Mismatch(expected)
        try:
            return {k: convert(x, what) for k, x in v.items()}
        except _Mismatch:
            raise _Mismatch(expected) from None

    return read, expected


def _nested(cls: type[Payload]) -> tuple[Convert, str]:
    expected = f"an object ({cls.__name__})"

    def read(v: Any, what: str) -> Payload:
        if isinstance(v, cls):
            return v
        if not isinstance(v, Mapping):
            raise _Mismatch(expected)
        try:
            return read_payload(cls, v, what=what)
        except PayloadError as exc:
            raise _Mismatch(f"{expected} ({exc})") from None

    return read, expected


def _converter(tp: Any) -> tuple[Convert, str]:
    """The reader of one annotation (see the module docstring for the forms allowed)."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    if isinstance(tp, type) and issubclass(tp, Payload):
        return _nested(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _union([_converter(a) for a in options], nullable=len(options) < len(args))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple_of(_converter(args[0]))
        return _fixed_tuple([_converter(a) for a in args])
    if origin in (Mapping, dict, typing.Mapping):
        return _mapping_of(_converter(args[1]) if args else _SCALARS[Any])
    raise TypeError(f"a payload field cannot be annotated {tp!r} (see elastic_chaos.events.payload)")


@dataclass(frozen=True)
class _Field:
    name: str
    convert: Convert
    required: bool


_SCHEMAS: dict[type, tuple[_Field, ...]] = {}


def schema(cls: type[Payload]) -> tuple[_Field, ...]:
    """The declared fields of ``cls`` with their readers (``extra`` aside), computed once."""
    found = _SCHEMAS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = tuple(_Field(f.name, _converter(hints[f.name])[0],
                             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                      for f in dataclasses.fields(cls) if f.name != "extra")
        _SCHEMAS[cls] = found
    return found


def read_payload(cls: type[P], raw: Mapping[str, Any], *, what: str = "event") -> P:
    """``raw`` (a JSON object) as a ``cls``; PayloadError names a field of the wrong type
    or a required one that is missing. Undeclared keys go to ``extra``."""
    values: dict[str, Any] = {}
    fields = schema(cls)
    for f in fields:
        if f.name not in raw or (raw[f.name] is None and not f.required):
            if f.required:
                raise PayloadError(what, f.name, "present", "nothing")
            continue
        try:
            values[f.name] = f.convert(raw[f.name], what)
        except _Mismatch as exc:
            raise PayloadError(what, f.name, exc.expected, raw[f.name]) from None
    declared = {f.name for f in fields}
    extra = {k: v for k, v in raw.items() if k not in declared}
    return cls(**values, extra=extra)


def payload_json(p: Payload) -> dict[str, Any]:
    """The payload as its JSON object: every declared field that says something (not None,
    not an empty list or object: a reader reads those as absent), then ``extra``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(p):
        if f.name == "extra":
            continue
        v = getattr(p, f.name)
        if v is not None and not (isinstance(v, (tuple, Mapping)) and not v):
            out[f.name] = _plain(v)
    for k, v in p.extra.items():
        out.setdefault(k, v)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, Payload):
        return payload_json(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return v


def field_value(p: Payload, name: str) -> Any:
    """A field by name, declared or in ``extra`` (None when neither has it): for code that
    handles events of several types alike (display, dedup keys)."""
    if name != "extra" and name in {f.name for f in schema(type(p))}:
        return getattr(p, name)
    return p.extra.get(name)
