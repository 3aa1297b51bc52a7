"""Options declared once: a dataclass field carries its help, its flag and its bounds.

A job, a fault, a hypothesis and a platform each declare what they accept as
fields of a frozen dataclass (kopf's settings, torchx's run options)::

    checkpoint_every: int = option(20, "steps between checkpoints", minimum=1)

From that one declaration come the command-line flag (``--checkpoint-every``,
its help with the default, the check that exits 2 with what is allowed), the
keyword the pytest fixture accepts (``checkpoint_every=20``), and the check in
the dataclass' ``__post_init__`` (``validate(self)``) that refuses the same
bad value from any caller. Numbers are checked to be finite and within their
bounds; nothing else restates a default.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Protocol

from elastic_chaos.errors import SpecError

_KEY = "chaos.option"

DAY_S = 86_400.0
"""The longest wait, duration or timeout an option accepts unless its meaning says less: no
run of this toolkit lasts a day, and a timer of a day is far inside threading.TIMEOUT_MAX."""
WEEK_S = 7 * DAY_S
"""For what may span a long soak (repeated faults' --run-for)."""
MAX_STEPS = 10_000_000
"""The most training steps an option may count (a step of 0.1 s: eleven days)."""
MAX_NODES = 1024
"""The most nodes (or worker processes per node) a job may ask for."""
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Meta:
    """What a field says about itself besides its type and default."""

    help: str
    flag: str | None = None
    """The command-line flag; None: ``--`` + the field name with dashes."""
    minimum: float | None = None
    """Smallest allowed value (inclusive)."""
    above: float | None = None
    """Values must be greater than this (exclusive): ``above=0`` for a positive duration."""
    maximum: float | None = None
    cli: bool = True
    """Whether the command line offers it (some fields are only for code and tests)."""
    metavar: str | None = None
    off_flag: str | None = None
    """For a boolean that defaults to True: the flag that turns it off (``--no-replace``)."""
    units: str = ""
    """Shown after the default in help (``s``)."""
    keyword: str | None = None
    """The name it goes by outside its class (the fixture keyword, the parsed flag's
    dest) where the field name is ambiguous: RendezvousSpec.backend is ``rdzv_backend``
    beside JobSpec.backend (the process group's)."""
    env: str | None = None
    """The environment variable a job option becomes on every node (None: not one)."""


def option(default: Any = MISSING, help: str = "", *, factory: Callable[[], Any] | Any = MISSING,
           flag: str | None = None, minimum: float | None = None, above: float | None = None,
           maximum: float | None = None, cli: bool = True, metavar: str | None = None,
           off_flag: str | None = None, units: str = "", keyword: str | None = None,
           env: str | None = None) -> Any:
    """A dataclass field with its declaration (see the module docstring)."""
    meta = Meta(help, flag, minimum, above, maximum, cli, metavar, off_flag, units, keyword, env)
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata={_KEY: meta})
    return dataclasses.field(default=default, metadata={_KEY: meta})


@dataclass(frozen=True)
class Declared:
    """One declared option of a dataclass, with its resolved type."""

    name: str
    type: Any
    default: Any
    meta: Meta

    @property
    def key(self) -> str:
        """The name it goes by outside its class (``Meta.keyword``, else the field name)."""
        return self.meta.keyword or self.name

    @property
    def flag(self) -> str:
        return self.meta.flag or "--" + self.key.replace("_", "-")

    @property
    def base_type(self) -> Any:
        """``int`` for ``int | None``; the element type for ``tuple[str, ...]``."""
        return _strip_optional(self.type)

    @property
    def optional(self) -> bool:
        return _strip_optional(self.type) is not self.type

    def allowed(self) -> str:
        """What values are allowed, in words (for error messages and help)."""
        base = self.base_type
        if isinstance(base, type) and issubclass(base, enum.Enum):
            return "one of " + ", ".join(str(m.value) for m in base)
        kind = {int: "a whole number", float: "a finite number"}.get(base, "")
        return " ".join([kind, _range_text(self)]).strip() or "any value"


def declared(cls: type) -> list[Declared]:
    """The declared options of dataclass ``cls``, in field order."""
    return list(_declared(cls))


@functools.cache
def _declared(cls: type) -> tuple[Declared, ...]:
    """Resolved once per class: every dataclass' ``__post_init__`` asks (type hints are slow)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_KEY)
        if meta is None:
            continue
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        out.append(Declared(f.name, hints[f.name], default, meta))
    return tuple(out)


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


# -- checking ----------------------------------------------------------------
def check_value(d: Declared, value: Any, label: str | None = None) -> Any:
    """``value`` converted to ``d``'s type and checked against its bounds; raises
    SpecError naming the option (``label``, default its name) and what it allows."""
    label = d.key if label is None else label
    if value is None:
        if d.optional or d.default is None:
            return None
        raise SpecError(f"{label}: a value is required ({d.allowed()})")
    base = d.base_type
    try:
        value = _convert(base, value)
    except (TypeError, ValueError):
        raise SpecError(f"{label} {value!r}: not {d.allowed()}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_bounds(d, value, label)
    return value


def _convert(base: Any, value: Any) -> Any:
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return value if isinstance(value, base) else base(value)
    if base is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(value)
    if base is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if base is float:
        if isinstance(value, bool):
            raise TypeError(value)
        return float(value)
    if base is Path:
        return Path(value)
    if base is str:
        return str(value)
    if typing.get_origin(base) is tuple:
        return tuple(value.items()) if isinstance(value, Mapping) else tuple(value)
    return value


def _check_bounds(d: Declared, value: float, label: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{label} {value}: not {d.allowed()}")
    m = d.meta
    if (m.minimum is not None and value < m.minimum) or (m.above is not None and value <= m.above) \
            or (m.maximum is not None and value > m.maximum):
        raise SpecError(f"{label} {value:g}: must be {d.allowed()}")


def validate(obj: Any) -> None:
    """Check (and normalise: an enum from its value, an int from 2.0) every declared
    field of dataclass instance ``obj``; for ``__post_init__`` of frozen dataclasses."""
    for d in declared(type(obj)):
        value = getattr(obj, d.name)
        checked = check_value(d, value)
        if checked is not value:
            object.__setattr__(obj, d.name, checked)


# -- routing keywords ------------------------------------------------------------
def split(values: Mapping[str, Any], *classes: type, aliases: Mapping[str, str] | None = None
          ) -> list[dict[str, Any]]:
    """Route keyword values to the dataclass that declares each name (first wins).
    Raises SpecError for a name no class declares, listing every accepted one."""
    aliases = aliases or {}
    names = [{f.name for f in dataclasses.fields(c) if f.init and not f.name.startswith("_")} for c in classes]
    out: list[dict[str, Any]] = [{} for _ in classes]
    unknown = []
    for key, value in values.items():
        key = aliases.get(key, key)
        for i, accepted in enumerate(names):
            if key in accepted:
                out[i][key] = value
                break
        else:
            unknown.append(key)
    if unknown:
        every = sorted(set().union(*names) | set(aliases))
        raise SpecError(f"unknown option(s) {sorted(unknown)}; accepted: {', '.join(every)}")
    return out


# -- the command line ------------------------------------------------------------
class ArgumentGroup(Protocol):
    """What ``add_arguments`` needs of a parser: argparse's, or an adapter (pytest's)."""

    def add_argument(self, *flags: str, **kwargs: Any) -> Any: ...


def add_arguments(group: ArgumentGroup, cls: type, *,
                  skip: Iterable[str] = (), defaults: Mapping[str, Any] | None = None) -> None:
    """Add ``cls``'s declared options as flags. Values not given stay absent from the
    parsed namespace (argparse.SUPPRESS), so the dataclass default is the only one;
    ``defaults`` only changes what the help shows."""
    skip = set(skip)
    for d in declared(cls):
        if not d.meta.cli or d.key in skip:
            continue
        shown = (defaults or {}).get(d.key, d.default)
        _add(group, d, shown)


def _add(group: ArgumentGroup, d: Declared, shown: Any) -> None:
    # argparse %-formats help: a declared help may say "92%"
    help_text = (d.meta.help + _default_text(shown, d.meta.units, _range_text(d))).replace("%", "%%")
    base = d.base_type
    if base is bool:
        if d.meta.off_flag:
            group.add_argument(d.flag, dest=d.key, action="store_true", default=argparse.SUPPRESS,
                               help=help_text)
            group.add_argument(d.meta.off_flag, dest=d.key, action="store_false", default=argparse.SUPPRESS,
                               help=f"the opposite of {d.flag}")
        else:
            group.add_argument(d.flag, dest=d.key, action="store_true", default=argparse.SUPPRESS, help=help_text)
        return
    if typing.get_origin(base) is tuple:
        group.add_argument(d.flag, dest=d.key, action="extend", nargs="+", default=argparse.SUPPRESS,
                           metavar=d.meta.metavar, help=help_text + " (one or more; repeatable)")
        return
    choices = [m.value for m in base] if isinstance(base, type) and issubclass(base, enum.Enum) else None
    metavar = d.meta.metavar or ("SECONDS" if d.meta.units == "s" else "N" if base is int else
                                 "X" if base is float else None)
    group.add_argument(d.flag, dest=d.key, type=_parser(d), default=argparse.SUPPRESS, choices=choices,
                       metavar=None if choices else metavar, help=help_text)


def _default_text(value: Any, units: str, allowed: str = "") -> str:
    shown = value is not MISSING and value is not None and value != () and value is not False
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float):
        value = f"{value:g}"
    parts = [f"default {value}{units}"] if shown else []
    if allowed:
        parts.append(allowed)
    return f" ({'; '.join(parts)})" if parts else ""


def _range_text(d: Declared) -> str:
    """A number's range for its help (``> 0 and <= 86400``); empty for other types."""
    if d.base_type not in (int, float):
        return ""
    m = d.meta
    parts = []
    if m.minimum is not None:
        parts.append(f">= {m.minimum:g}")
    if m.above is not None:
        parts.append(f"> {m.above:g}")
    if m.maximum is not None:
        parts.append(f"<= {m.maximum:g}")
    return " and ".join(parts)


def _parser(d: Declared) -> Callable[[str], Any]:
    base = d.base_type

    def parse(text: str) -> Any:
        if isinstance(base, type) and issubclass(base, enum.Enum):
            return text  # argparse's choices say what is allowed
        try:
            if d.optional and text.lower() == "none":
                return None
            raw: Any = float(text) if base in (int, float) else text
            return check_value(d, raw, label="")
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {d.allowed()}") from None
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None

    parse.__name__ = d.allowed()  # argparse names the type in "invalid ... value" messages
    return parse


def environment(obj: Any) -> dict[str, str]:
    """The declared options of dataclass instance ``obj`` that become environment
    variables (``env=``) and are set (not None): variable -> value (a bool as 1/0)."""
    out = {}
    for d in declared(type(obj)):
        value = getattr(obj, d.name)
        if d.meta.env is not None and value is not None:
            out[d.meta.env] = str(int(value)) if isinstance(value, bool) else f"{value:g}" \
                if isinstance(value, float) else str(value)
    return out


def given(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s options that were given on the command line."""
    return {d.key: getattr(namespace, d.key) for d in declared(cls) if hasattr(namespace, d.key)}
