"""Frozen records of bench/results.json that read back exactly what was written.

results.json is a record of measurements kept for years, written by benches of different ages: a record
written before a field existed lacks it. A typed value read from it must neither invent that field (a
``declared_dead: 0`` nobody counted) nor drop one it had, so every record here keeps ``absent`` -- the
fields its JSON lacked -- and writes back only what it read; a field named in ``OPTIONAL`` is written only
when it holds a value (the bench never wrote it as null). :func:`read` and :meth:`JsonRecord.to_json` are
the one reader and writer; each record's ``from_json`` names how its nested values are parsed.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, ClassVar, TypeVar, cast

T = TypeVar("T")
R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """Mixin of a frozen dataclass with a field ``absent: frozenset[str]`` (keyword-only, not compared)."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    absent: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        """The record as results.json keeps it: its fields in declaration order, less the absent ones."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "absent" or f.name in self.absent or (value is None and f.name in self.OPTIONAL):
                continue
            out[f.name] = encode(value)
        return out

    def updated(self: R, **changes: Any) -> R:
        """A copy with ``changes``: each field given is held from now on (no longer absent); an OPTIONAL one set
        to None is dropped from the JSON, as the bench drops it."""
        return cast(R, replace(cast(Any, self), absent=self.absent - changes.keys(), **changes))

    def has(self, name: str) -> bool:
        """Whether the record holds ``name`` (False: written before the field existed, or never measured)."""
        return name not in self.absent


def encode(value: Any) -> Any:
    """A field's JSON: records and typed values by their own to_json, tuples as lists."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def read(cls: type, raw: Mapping[str, Any], **parse: Callable[[Any], Any]) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from ``raw``: each field it holds (through ``parse[name]`` when given),
    and ``absent``, the fields it lacks (left at their defaults). A key ``cls`` does not know is refused
    (ValueError): reading it back would lose it."""
    names = [f.name for f in fields(cls) if f.name != "absent"]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    kw: dict[str, Any] = {n: parse[n](raw[n]) if n in parse else raw[n] for n in names if n in raw}
    kw["absent"] = frozenset(n for n in names if n not in raw)
    return kw


def optional(parse: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """``parse``, or None for a null."""
    return lambda raw: None if raw is None else parse(raw)


def each(parse: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    """``parse`` over a list, as a tuple."""
    return lambda raw: tuple(parse(r) for r in raw or ())
