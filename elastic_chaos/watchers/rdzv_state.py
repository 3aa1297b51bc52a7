"""Decode torch's dynamic-rendezvous state from etcd without trusting it.

``/torch/elastic/rendezvous/<run_id>`` holds a base64 pickle of torch's
``_RendezvousState``. etcd is writable by anything that can reach it, so
unpickling it with ``pickle.loads`` would run whatever code a writer put
there. This unpickler allows only the handful of globals a genuine state
names, maps torch's classes onto our own plain dataclasses (so decoding
needs no torch import), and refuses everything else with UnsafeUnpickle. A
pickle of allowed classes can still hold anything in any field, so each field
is then checked for the type torch writes: a malformed value is an
UndecodableState, never an AttributeError or OverflowError in whoever reads it.
"""
from __future__ import annotations

import base64
import binascii
import datetime
import io
import pickle
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.errors import UndecodableState, UnsafeUnpickle

_TORCH_MODULE = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"


@dataclass(frozen=True, order=True)
class NodeDesc:
    """A rendezvous participant: host address, agent PID, per-process counter."""

    addr: str = ""
    pid: int = 0
    local_id: int = 0

    def __str__(self) -> str:
        return f"{self.addr}_{self.pid}_{self.local_id}"


class _NodeDescShadow:
    # torch's _NodeDesc is a frozen dataclass: pickle rebuilds it with
    # object.__new__ (via copyreg) and then sets its __dict__ state.
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class _StateShadow:
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass
class RendezvousState:
    round: int = 0
    complete: bool = False
    deadline: datetime.datetime | None = None
    closed: bool = False
    participants: dict[NodeDesc, int] = field(default_factory=dict)
    wait_list: set[NodeDesc] = field(default_factory=set)
    redundancy_list: set[NodeDesc] = field(default_factory=set)
    last_heartbeats: dict[NodeDesc, datetime.datetime] = field(default_factory=dict)


def _reconstruct(cls: type, base: type, state: Any) -> Any:
    # copyreg._reconstructor(cls, object, None) -> object.__new__(cls), restricted
    # to the shadow classes this module itself handed out.
    if cls not in (_NodeDescShadow, _StateShadow) or base is not object:
        raise UnsafeUnpickle(f"refusing to reconstruct {cls!r}")
    return object.__new__(cls)


_ALLOWED: dict[tuple[str, str], Any] = {
    (_TORCH_MODULE, "_RendezvousState"): _StateShadow,
    (_TORCH_MODULE, "_NodeDesc"): _NodeDescShadow,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "timezone"): datetime.timezone,
    ("datetime", "timedelta"): datetime.timedelta,
    ("builtins", "set"): set,
    ("builtins", "object"): object,
    ("copyreg", "_reconstructor"): _reconstruct,
}


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafeUnpickle(
                f"rendezvous state names {module}.{name}, which is not a rendezvous class; "
                "refusing to unpickle it (etcd content is untrusted)") from None


def decode(raw: bytes | str) -> RendezvousState:
    """Decode the etcd value (base64 text) into a RendezvousState whose fields have
    the types they are declared with.

    Raises UndecodableState, and nothing else, for a value that is not one: not
    base64, not a pickle, not a state, or a state whose fields have other types or
    values out of range (``participants = 5``, ``round = inf``); its subclass
    UnsafeUnpickle when the pickle names a class outside the allow-list (that class
    is never loaded, nothing of it runs).
    """
    try:
        blob = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise UndecodableState(f"rendezvous value is not base64: {exc}") from exc
    try:
        obj = _AllowListUnpickler(io.BytesIO(blob)).load()
    except UnsafeUnpickle:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed pickle of any kind
        raise UndecodableState(f"rendezvous value is not a valid pickle: {type(exc).__name__}: "
                               f"{_short(exc)}") from exc
    if not isinstance(obj, _StateShadow):
        raise UndecodableState(f"rendezvous value decodes to {type(obj).__name__}, not a state")
    return _convert(obj.__dict__)


# -- checking what the pickle held ---------------------------------------------------
# A pickle made only of allowed classes can still hold anything in any field: each
# field is checked for the type torch writes, so whatever reads a decoded state
# (describe, sorting, JSON) meets only what it was declared to hold.

_INT_RANGE = 2 ** 63


def _convert(d: dict[Any, Any]) -> RendezvousState:
    return RendezvousState(
        round=_int(d.get("round", 0), "round"),
        complete=_bool(d.get("complete", False), "complete"),
        deadline=None if d.get("deadline") is None else _when(d["deadline"], "deadline"),
        closed=_bool(d.get("closed", False), "closed"),
        participants={_node(k, "a participant"): _int(v, "a participant's rank")
                      for k, v in _mapping(d.get("participants"), "participants").items()},
        wait_list=_nodes(d.get("wait_list"), "wait_list"),
        redundancy_list=_nodes(d.get("redundancy_list"), "redundancy_list"),
        last_heartbeats={_node(k, "a heartbeat's node"): _when(v, "a heartbeat")
                         for k, v in _mapping(d.get("last_heartbeats"), "last_heartbeats").items()},
    )


def _node(shadow: Any, what: str) -> NodeDesc:
    if not isinstance(shadow, _NodeDescShadow):
        raise UndecodableState(f"{what} is {_show(shadow)}, not a node descriptor")
    d = shadow.__dict__
    return NodeDesc(addr=_text(d.get("addr", ""), "a node's addr"), pid=_int(d.get("pid", 0), "a node's pid"),
                    local_id=_int(d.get("local_id", 0), "a node's local_id"))


def _nodes(value: Any, what: str) -> set[NodeDesc]:
    if value is None:
        return set()
    if not isinstance(value, (set, frozenset, list, tuple)):
        raise UndecodableState(f"{what} is {_show(value)}, not a set of node descriptors")
    return {_node(n, f"an entry of {what}") for n in value}


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UndecodableState(f"{what} is {_show(value)}, not a mapping of node descriptors")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT_RANGE <= value < _INT_RANGE:
        raise UndecodableState(f"{what} is {_show(value)}, not a 64-bit integer")
    return int(value)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UndecodableState(f"{what} is {_show(value)}, not a boolean")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UndecodableState(f"{what} is {_show(value)}, not text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UndecodableState(f"{what} is not UTF-8 text (it holds a lone surrogate)") from None
    return str(value)


def _when(value: Any, what: str) -> datetime.datetime:
    if not isinstance(value, datetime.datetime):
        raise UndecodableState(f"{what} is {_show(value)}, not a datetime")
    try:
        epoch(value)
    except (OverflowError, ValueError, OSError) as exc:
        raise UndecodableState(f"{what} ({value.isoformat()}) has no epoch time: {exc}") from exc
    return value


def epoch(when: datetime.datetime) -> float:
    """A rendezvous datetime (timezone-aware UTC in torch >= 2.x; naive = UTC) as epoch seconds."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return round(when.timestamp(), 3)


def _show(value: Any) -> str:
    """A value for an error message, never expensive or failing to render: a pickle can hold
    ints of millions of digits, strings of megabytes, lists nested a million deep."""
    name = type(value).__name__
    if value is None or isinstance(value, (bool, float)):
        return f"{name} {value!r}"
    if isinstance(value, int):
        return f"{name} {value!r}" if -_INT_RANGE <= value < _INT_RANGE else f"an int of {value.bit_length()} bits"
    if isinstance(value, str):
        return f"{name} {value[:40]!r}"
    return f"a {name}"


def _short(exc: BaseException) -> str:
    try:
        return str(exc)[:200]
    except Exception:  # noqa: BLE001 - an exception whose message cannot be rendered
        return "(no message)"
