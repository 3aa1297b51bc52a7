"""Watch the job's rendezvous in etcd and record every round as it forms.

Uses etcd's v2 watch (long poll with ``waitIndex``), so every write to the
rendezvous key is seen, not only the states that happen to be there when we
look. Heartbeat-only writes are dropped; every change of round, completeness,
participants or waiting nodes becomes a ``rendezvous/state`` event, and the
first sight of a completed round a ``rendezvous/round_complete`` event.
Participants are named by node using their agent PID. Each state event also
carries the round's last-call deadline and every node's last heartbeat (epoch
seconds), so a report can tell a keep-alive expiry from a last call.
"""
from __future__ import annotations

import datetime
import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from chaos.errors import UnsafeUnpickle
from chaos.events import RdzvEv, Timeline
from chaos.watchers.api import Watcher
from chaos.watchers.rdzv_state import NodeDesc, RendezvousState, decode

log = logging.getLogger(__name__)

KEY_PREFIX = "/torch/elastic/rendezvous"


class RendezvousWatcher(Watcher):
    interval_s = 0.0  # the long poll itself paces the loop

    def __init__(self, timeline: Timeline, endpoint: str, run_id: str,
                 pid_to_node: Callable[[], Mapping[Any, str]], *, wait_s: float = 1.0) -> None:
        super().__init__(timeline)
        self.url = f"http://{endpoint}/v2/keys{KEY_PREFIX}/{run_id}"
        self._pid_to_node = pid_to_node
        self._wait_s = wait_s
        self._index: int | None = None
        self._last_key: tuple[Any, ...] | None = None
        self._completed_rounds: set[int] = set()
        self._reachable = True

    def poll(self) -> None:
        query = "" if self._index is None else f"?wait=true&waitIndex={self._index + 1}"
        try:
            with urllib.request.urlopen(self.url + query, timeout=self._wait_s) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            self._http_error(exc)
            return
        except (TimeoutError, urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            # (HTTPException: a store that went away mid-answer, e.g. its pod deleted: IncompleteRead)
            if _is_timeout(exc):
                return  # nothing changed during the long poll
            self._unreachable(exc)
            return
        self._mark_reachable()
        node = body.get("node") or {}
        self._index = int(node.get("modifiedIndex", self._index or 0))
        if body.get("action") in ("delete", "expire"):
            self.timeline.emit(RdzvEv.DELETED)
            return
        if "value" in node:
            self._record(node["value"])

    def _http_error(self, exc: urllib.error.HTTPError) -> None:
        payload = _json_or_empty(exc)
        code = payload.get("errorCode")
        if code == 100:        # key not found: the job has not rendezvoused yet
            self._index = int(payload.get("index", 0))
            self._mark_reachable()
            time.sleep(0.1)
        elif code == 401:      # waitIndex fell out of etcd's history window: re-read
            self._index = None
        else:
            self._unreachable(exc)

    def _unreachable(self, exc: BaseException) -> None:
        if self._reachable and not self.ending:
            self._reachable = False
            self.timeline.emit(RdzvEv.STORE_UNREACHABLE, error=str(exc)[:200])
        self._index = None
        self._stop.wait(0.2)

    def _mark_reachable(self) -> None:
        if not self._reachable:
            self._reachable = True
            self.timeline.emit(RdzvEv.STORE_REACHABLE)

    def _record(self, value: str) -> None:
        try:
            state = decode(value)
        except UnsafeUnpickle as exc:
            self.timeline.emit(RdzvEv.REFUSED, reason=str(exc))
            return
        except ValueError as exc:
            self.timeline.emit(RdzvEv.UNDECODABLE, reason=str(exc)[:200])
            return
        names = self._pid_to_node()
        key = _change_key(state)
        if key == self._last_key:
            return  # a heartbeat: nothing a reader cares about changed
        self._last_key = key
        data = describe(state, names)
        self.timeline.emit(RdzvEv.STATE, **data)
        if state.complete and state.round not in self._completed_rounds:
            self._completed_rounds.add(state.round)
            self.timeline.emit(RdzvEv.ROUND_COMPLETE, **data)


def _change_key(state: RendezvousState) -> tuple[Any, ...]:
    return (state.round, state.complete, state.closed, tuple(sorted(state.participants.items())),
            tuple(sorted(state.wait_list)), tuple(sorted(state.redundancy_list)))


def describe(state: RendezvousState, names: Mapping[Any, str]) -> dict[str, Any]:
    """The state as event data; each node descriptor gains the platform's node name,
    found by its address (str keys: the address or its short host name) or, where
    addresses are shared (every local node is "localhost"), its agent PID (int keys;
    every pod's agent is PID 1)."""

    def node(n: NodeDesc) -> dict[str, Any]:
        name = names.get(n.addr) or names.get(n.addr.split(".")[0]) or names.get(n.pid)
        return {"node": name, "id": str(n)}

    return {
        "round": state.round, "complete": state.complete, "closed": state.closed,
        "participants": [{**node(n), "rank": r} for n, r in sorted(state.participants.items())],
        "wait_list": [node(n) for n in sorted(state.wait_list)],
        "redundancy_list": [node(n) for n in sorted(state.redundancy_list)],
        "num_nodes": len(state.participants) if state.complete else None,
        "deadline": _epoch(state.deadline),
        "heartbeats": {str(n): _epoch(t) for n, t in sorted(state.last_heartbeats.items())},
    }


def _epoch(when: object) -> float | None:
    """A rendezvous datetime (timezone-aware UTC in torch >= 2.x; naive = UTC) as epoch seconds."""
    if not isinstance(when, datetime.datetime):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return round(when.timestamp(), 3)


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return True
    reason = getattr(exc, "reason", None)
    return isinstance(reason, (socket.timeout, TimeoutError))


def _json_or_empty(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        loaded = json.loads(exc.read() or b"{}")
        return loaded if isinstance(loaded, dict) else {}
    except ValueError:
        return {}
