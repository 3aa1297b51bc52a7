"""Rendezvous values as torch's etcd-v2 backend writes them: a base64 pickle of torch's own
``_RendezvousState`` (nodes named ``ADDR_PID_0``), so a watcher under test decodes exactly
what a real job leaves in etcd."""
from __future__ import annotations

import base64
import datetime
import pickle
from typing import Any


def encode(obj: Any, protocol: int = pickle.DEFAULT_PROTOCOL) -> str:
    """``obj`` pickled and base64-encoded, as the backend stores its state."""
    return base64.b64encode(pickle.dumps(obj, protocol=protocol)).decode()


def torch_state(round_: int, complete: bool, participants: list[tuple[int, int]], waiting: list[int],
                beats: dict[int, float], addr: str = "10.0.0.1") -> str:
    """A torch _RendezvousState with nodes named by agent pid (participants: (pid, rank))."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState
    state = _RendezvousState()
    state.round, state.complete = round_, complete
    state.participants = {_NodeDesc(addr, pid, 0): rank for pid, rank in participants}
    state.wait_list = {_NodeDesc(addr, pid, 0) for pid in waiting}
    state.last_heartbeats = {_NodeDesc(addr, pid, 0):
                             datetime.datetime.fromtimestamp(t, datetime.timezone.utc) for pid, t in beats.items()}
    return encode(state)


def malformed_state(**fields: Any) -> str:
    """A state made only of allowed classes whose fields hold whatever is given
    (``participants=5``, ``round=float("inf")``): what a buggy or hostile writer leaves."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState
    state = _RendezvousState()
    state.__dict__.update(fields)
    return encode(state)
