"""Watch the job's rendezvous in etcd and record every round as it forms.

Uses etcd's v2 watch through python-etcd (``read(key, wait=True, waitIndex=...)``,
a long poll of ``wait_s``, so a stop is prompt): every write to the rendezvous
key is seen, not only the states that happen to be there when we look. When
etcd's history no longer reaches back to our index, the key is read afresh and
watched from the store's index. The watcher only reads.

Heartbeat-only writes are dropped; every change of round, completeness,
participants or waiting nodes becomes a ``rendezvous/state`` event, and the
first sight of a completed round a ``rendezvous/round_complete`` event.
Participants are named by node using their agent PID. Each state event also
carries the round's last-call deadline and every node's last heartbeat (epoch
seconds), so a report can tell a keep-alive expiry from a last call.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import etcd

from elastic_chaos.errors import UndecodableState, UnsafeUnpickle
from elastic_chaos.events import RdzvEv, Timeline
from elastic_chaos.events.rdzv_events import Participant, RdzvState, StoreError, Unreadable
from elastic_chaos.host import etcd_v2
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.rdzv_state import NodeDesc, RendezvousState, decode, epoch

log = logging.getLogger(__name__)

KEY_PREFIX = "/torch/elastic/rendezvous"


class RendezvousWatcher(Watcher):
    interval_s = 0.0  # the long poll itself paces the loop

    def __init__(self, timeline: Timeline, endpoint: str, run_id: str,
                 pid_to_node: Callable[[], Mapping[Any, str]], *, wait_s: float = 1.0) -> None:
        super().__init__(timeline)
        self.key = f"{KEY_PREFIX}/{run_id}"
        self._etcd = etcd_v2.client(endpoint, timeout_s=wait_s)
        self._pid_to_node = pid_to_node
        self._wait_s = wait_s
        self._index: int | None = None
        """The etcd index seen last: the next long poll waits for a change after it (None: read afresh)."""
        self._last_key: tuple[Any, ...] | None = None
        self._completed_rounds: set[int] = set()
        self._reachable = True
        self.read_once = threading.Event()
        """Set once the key was read (or found absent): from then on every change is seen,
        one by one; changes before it are seen only as the value they left."""

    def poll(self) -> None:
        """One read (first, or after the history was lost) or one long poll of at most ``wait_s``."""
        try:
            result = self._read()
        except etcd.EtcdKeyNotFound as exc:   # the job has not rendezvoused yet: wait for the key
            self._index = int((exc.payload or {}).get("index", 0))
            self._mark_reachable()
            return
        except etcd.EtcdEventIndexCleared:    # our index fell out of etcd's 1000-event history
            self._index = None
            self._mark_reachable()
            return
        except etcd_v2.CLIENT_ERRORS as exc:
            if not etcd_v2.is_timeout(exc):   # a timeout: nothing changed during the long poll
                self._unreachable(exc)
            return
        self._mark_reachable()
        if result.action in ("delete", "expire", "compareAndDelete"):
            self.timeline.emit(RdzvEv.DELETED)
        elif result.value is not None:
            self._record(result.value)

    def _read(self) -> Any:
        if self._index is None:
            result = self._etcd.read(self.key)
            self._index = int(result.etcd_index)   # the store's index as read: later changes come after it
        else:
            result = self._etcd.read(self.key, wait=True, waitIndex=self._index + 1, timeout=self._wait_s)
            self._index = int(result.modifiedIndex)
        return result

    def _unreachable(self, exc: BaseException) -> None:
        if self._reachable and not self.ending:
            self._reachable = False
            self.timeline.emit(RdzvEv.STORE_UNREACHABLE, None, StoreError(error=str(exc)[:200]))
        self._index = None
        self._stop.wait(0.2)

    def _mark_reachable(self) -> None:
        self.read_once.set()
        if not self._reachable:
            self._reachable = True
            self.timeline.emit(RdzvEv.STORE_REACHABLE)

    def _record(self, value: str) -> None:
        try:
            state = decode(value)
        except UnsafeUnpickle as exc:
            self.timeline.emit(RdzvEv.REFUSED, None, Unreadable(reason=str(exc)))
            return
        except UndecodableState as exc:   # what a buggy or hostile writer left; the next write may be fine
            self.timeline.emit(RdzvEv.UNDECODABLE, None, Unreadable(reason=str(exc)[:200]))
            return
        names = self._pid_to_node()
        key = _change_key(state)
        if key == self._last_key:
            return  # a heartbeat: nothing a reader cares about changed
        self._last_key = key
        data = describe(state, names)
        self.timeline.emit(RdzvEv.STATE, None, data)
        if state.complete and state.round not in self._completed_rounds:
            self._completed_rounds.add(state.round)
            self.timeline.emit(RdzvEv.ROUND_COMPLETE, None, data)


def _change_key(state: RendezvousState) -> tuple[Any, ...]:
    return (state.round, state.complete, state.closed, tuple(sorted(state.participants.items())),
            tuple(sorted(state.wait_list)), tuple(sorted(state.redundancy_list)))


def describe(state: RendezvousState, names: Mapping[Any, str]) -> RdzvState:
    """The state as event data; each node descriptor gains the platform's node name,
    found by its address (str keys: the address or its short host name) or, where
    addresses are shared (every local node is "localhost"), its agent PID (int keys;
    every pod's agent is PID 1)."""

    def node(n: NodeDesc, rank: int | None = None) -> Participant:
        name = names.get(n.addr) or names.get(n.addr.split(".")[0]) or names.get(n.pid)
        return Participant(node=name, id=str(n), rank=rank)

    return RdzvState(
        round=state.round, complete=state.complete, closed=state.closed,
        participants=tuple(node(n, r) for n, r in sorted(state.participants.items())),
        wait_list=tuple(node(n) for n in sorted(state.wait_list)),
        redundancy_list=tuple(node(n) for n in sorted(state.redundancy_list)),
        num_nodes=len(state.participants) if state.complete else None,
        deadline=None if state.deadline is None else epoch(state.deadline),
        heartbeats={str(n): epoch(t) for n, t in sorted(state.last_heartbeats.items())})
