"""Rendezvous values as torch's etcd-v2 backend writes them: a base64 pickle of torch's own
``_RendezvousState`` (nodes named ``ADDR_PID_0``), so a watcher under test decodes exactly
what a real job leaves in etcd; and a node loss replayed as the writes torch makes."""
from __future__ import annotations

import base64
import datetime
import pickle
import threading
import time
from collections.abc import Callable, Sequence
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


def replay_node_loss(put: Callable[[str], None], ready: threading.Event | None = None,
                     before: Sequence[str] = ()) -> threading.Thread:
    """From a thread, once ``ready`` is set: write ``before``, then a node loss as torch
    2.13 performs it. Node 101 survives, node 202 dies: its heartbeats stop, 101
    re-rendezvouses, 202 expires, round 1 forms with 101 alone and completes."""
    torch_state(0, True, [], [], {})  # import torch before the clock matters

    def run() -> None:
        if ready is not None:
            ready.wait(60)
        for value in before:
            put(value)
            time.sleep(0.3)
        t0 = time.time()
        put(torch_state(0, True, [(101, 0), (202, 1)], [], {101: t0, 202: t0}))
        time.sleep(1.0)
        died = time.time() - 0.2                           # 202's last heartbeat; then it is killed
        put(torch_state(0, True, [(202, 1)], [101], {101: time.time(), 202: died}))  # 101 re-rendezvous
        time.sleep(0.7)
        put(torch_state(1, False, [(101, 0)], [], {101: time.time()}))             # 202 expired
        time.sleep(0.7)
        put(torch_state(1, True, [(101, 0)], [], {101: time.time()}))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
