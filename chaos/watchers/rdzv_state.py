"""Decode torch's dynamic-rendezvous state from etcd without trusting it.

``/torch/elastic/rendezvous/<run_id>`` holds a base64 pickle of torch's
``_RendezvousState``. etcd is writable by anything that can reach it, so
unpickling it with ``pickle.loads`` would run whatever code a writer put
there. This unpickler allows only the handful of globals a genuine state
names, maps torch's classes onto our own plain dataclasses (so decoding
needs no torch import), and refuses everything else with UnsafeUnpickle.
"""
from __future__ import annotations

import base64
import binascii
import datetime
import io
import pickle
from dataclasses import dataclass, field
from typing import Any

from chaos.errors import UnsafeUnpickle

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
    """Decode the etcd value (base64 text) into a RendezvousState.

    Raises UnsafeUnpickle for a pickle naming any other class, ValueError for
    bytes that are not a rendezvous state at all.
    """
    try:
        blob = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"rendezvous value is not base64: {exc}") from exc
    try:
        obj = _AllowListUnpickler(io.BytesIO(blob)).load()
    except UnsafeUnpickle:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed pickle of any kind
        raise ValueError(f"rendezvous value is not a valid pickle: {exc}") from exc
    if not isinstance(obj, _StateShadow):
        raise ValueError(f"rendezvous value decodes to {type(obj).__name__}, not a state")
    return _convert(obj.__dict__)


def _node(shadow: Any) -> NodeDesc:
    if not isinstance(shadow, _NodeDescShadow):
        raise ValueError(f"expected a node descriptor, got {type(shadow).__name__}")
    d = shadow.__dict__
    return NodeDesc(addr=str(d.get("addr", "")), pid=int(d.get("pid", 0)),
                    local_id=int(d.get("local_id", 0)))


def _convert(d: dict[str, Any]) -> RendezvousState:
    return RendezvousState(
        round=int(d.get("round", 0)),
        complete=bool(d.get("complete", False)),
        deadline=d.get("deadline"),
        closed=bool(d.get("closed", False)),
        participants={_node(k): int(v) for k, v in (d.get("participants") or {}).items()},
        wait_list={_node(n) for n in d.get("wait_list") or ()},
        redundancy_list={_node(n) for n in d.get("redundancy_list") or ()},
        last_heartbeats={_node(k): v for k, v in (d.get("last_heartbeats") or {}).items()},
    )
