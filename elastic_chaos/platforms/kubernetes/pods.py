"""Turn pod and node watch events into the job's nodes and timeline events.

A job node is a worker pod *name*: both controllers re-create a lost replica
under the same name, so a new uid under a known name is that node's
replacement (``node/started`` with ``replaces``). Pod phases map onto
NodeState; a pod deleted by a fault is ``lost`` (the fault has already said
so; the watch only says it when nobody did, e.g. the cluster evicted it).
Machines (Kubernetes nodes) produce ``machine_*`` events: added, ready,
not_ready, cordoned, uncordoned, deleted; the replacement split of a spot
loss (instance up -> node Ready -> pod running -> rendezvous) reads them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import Exited, Lost, OnMachine, Restarted, Started, Terminating
from elastic_chaos.platforms.api import NodeInfo, NodeState
from elastic_chaos.platforms.kubernetes.logs import Instance
from elastic_chaos.platforms.kubernetes.watch import K8sObject

REPLACEMENT_WINDOW_S = 180.0
"""How long after losing a pod its replacement counts as still on its way."""


@dataclass
class _Pod:
    info: NodeInfo
    obj: K8sObject
    restarts: int = 0
    said: set[str] = field(default_factory=set)   # once-per-incarnation events already emitted


def _container_status(obj: K8sObject, container: str | None = None) -> dict[str, Any]:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    for st in statuses:
        if container is None or st.get("name") == container:
            return dict(st)
    return {}


def _exit_code(obj: K8sObject) -> int | None:
    state = _container_status(obj).get("state") or {}
    terminated = state.get("terminated") or {}
    code = terminated.get("exitCode")
    return int(code) if code is not None else None


class PodTracker:
    """The job's worker pods by name (latest incarnation), fed by an ObjectWatch."""

    def __init__(self, timeline: Timeline, *, final_exit: Callable[[int | None], bool] | None = None) -> None:
        self.timeline = timeline
        self.final_exit = final_exit
        """Whether a container that exited with a code stays down though the pod lives on (the
        statefulset kind's supervisor: the pod keeps Running, restartCount goes up, the agent does
        not come back). None: only the pod's phase says the node exited (the operators' pods)."""
        self._pods: dict[str, _Pod] = {}
        self._expected: set[str] = set()
        self._lost_at: dict[str, float] = {}
        self._cond = threading.Condition()
        self.stopping = False
        self.on_new_pod: Callable[[str], None] | None = None

    # -- fed by the watch -----------------------------------------------------------
    def on_event(self, kind: str, obj: K8sObject) -> None:
        meta = obj.get("metadata") or {}
        name, uid = str(meta.get("name")), str(meta.get("uid"))
        new = False
        with self._cond:
            pod = self._pods.get(name)
            if kind == "DELETED":
                if pod is not None and pod.info.labels.get("uid") == uid:
                    self._deleted(pod)
            else:
                if pod is None or pod.info.labels.get("uid") != uid:
                    pod, new = self._incarnation(name, uid, obj, pod), True
                pod.obj = obj
                self._update(pod)
            self._cond.notify_all()
        if new and self.on_new_pod is not None:
            self.on_new_pod(name)

    def _incarnation(self, name: str, uid: str, obj: K8sObject, old: _Pod | None) -> _Pod:
        if old is not None and old.info.state.is_alive():   # its DELETED was never seen (a relist)
            old.info = replace(old.info, state=NodeState.LOST)
        replaces = name if old is not None else self._oldest_unreplaced()
        if replaces is not None:
            self._lost_at.pop(replaces, None)
        info = NodeInfo(name=name, state=NodeState.STARTING, started_at=time.time(), replaces=replaces,
                        labels={"uid": uid})
        pod = _Pod(info=info, obj=obj)
        self._pods[name] = pod
        self.timeline.emit(NodeEv.STARTED, name, Started(uid=uid, replaces=replaces), t=info.started_at)
        return pod

    def _oldest_unreplaced(self) -> str | None:
        gone = [n for n, p in self._pods.items() if not p.info.state.is_alive() and n in self._lost_at]
        return min(gone, key=lambda n: self._lost_at[n]) if gone else None

    def _update(self, pod: _Pod) -> None:
        obj, name = pod.obj, pod.info.name
        machine = (obj.get("spec") or {}).get("nodeName")
        if machine and pod.info.labels.get("machine") != machine:
            pod.info = replace(pod.info, labels={**pod.info.labels, "machine": str(machine)})
            self.timeline.emit(NodeEv.SCHEDULED, name, OnMachine(machine=machine))
        address = (obj.get("status") or {}).get("podIP")
        if address and pod.info.labels.get("address") != address:
            # the agents advertise it (--local-addr): how the rendezvous names its participants
            pod.info = replace(pod.info, labels={**pod.info.labels, "address": str(address)})
        if not pod.info.state.is_alive():
            return
        deleting = (obj.get("metadata") or {}).get("deletionTimestamp")
        if deleting and "terminating" not in pod.said:
            pod.said.add("terminating")
            self.timeline.emit(NodeEv.TERMINATING, name, Terminating(
                grace_s=(obj.get("metadata") or {}).get("deletionGracePeriodSeconds")))
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Running" and pod.info.state is NodeState.STARTING:
            pod.info = replace(pod.info, state=NodeState.RUNNING)
            self.timeline.emit(NodeEv.RUNNING, name, OnMachine(machine=machine))
        elif phase in ("Succeeded", "Failed"):
            self._exited(pod, _exit_code(obj), phase=phase)
            return
        if self.final_exit is not None and not deleting:
            code = _ended_for_good(obj, self.final_exit)
            if code is not None:
                self._exited(pod, code, phase=phase, restart_count=int(_container_status(obj).get("restartCount") or 0))
                return
        restarts = int(_container_status(obj).get("restartCount") or 0)
        if restarts > pod.restarts:
            last = (_container_status(obj).get("lastState") or {}).get("terminated") or {}
            pod.restarts = restarts
            self.timeline.emit(NodeEv.RESTARTED, name, Restarted(
                restart_count=restarts, exit_code=last.get("exitCode")))

    def _exited(self, pod: _Pod, code: int | None, **data: Any) -> None:
        pod.info = replace(pod.info, state=NodeState.EXITED, exit_code=code)
        self.timeline.emit(NodeEv.EXITED, pod.info.name, Exited.read({**data, "exit_code": code}))

    def _deleted(self, pod: _Pod) -> None:
        name = pod.info.name
        if self.stopping:
            if pod.info.state.is_alive():
                pod.info = replace(pod.info, state=NodeState.STOPPED)
            return
        if pod.info.state.is_alive():
            pod.info = replace(pod.info, state=NodeState.LOST)
            if name in self._expected:
                self._expected.discard(name)          # the fault already recorded the loss
            else:
                self.timeline.emit(NodeEv.LOST, name, Lost(
                    action="pod-deleted", machine=pod.info.labels.get("machine")))
        self._lost_at[name] = time.time()

    # -- asked by the platform ------------------------------------------------------
    def expect_loss(self, name: str) -> None:
        """A fault is about to take ``name`` and records that itself."""
        with self._cond:
            self._expected.add(name)

    def mark_lost(self, name: str) -> None:
        """``name``'s machine is gone: its pod is lost now, though its object stays until the
        pod garbage collector deletes it (its DELETED event is then no news). Idempotent."""
        with self._cond:
            pod = self._pods.get(name)
            if pod is not None and pod.info.state.is_alive():
                pod.info = replace(pod.info, state=NodeState.LOST)
                self._expected.discard(name)
                self._lost_at[name] = time.time()
            self._cond.notify_all()

    def nodes(self) -> list[NodeInfo]:
        with self._cond:
            return sorted((p.info for p in self._pods.values()), key=lambda i: i.started_at)

    def names(self) -> list[str]:
        with self._cond:
            return list(self._pods)

    def get(self, name: str) -> NodeInfo | None:
        with self._cond:
            pod = self._pods.get(name)
            return pod.info if pod else None

    def instance(self, name: str, container: str) -> Instance | None:
        """What the log follower should read now (None: no live pod by that name)."""
        with self._cond:
            pod = self._pods.get(name)
            if pod is None or pod.info.state in (NodeState.LOST, NodeState.STOPPED):
                return None
            st = _container_status(pod.obj, container)
            state = st.get("state") or {}
            started = "running" in state or "terminated" in state
            return Instance(uid=pod.info.labels["uid"], restarts=int(st.get("restartCount") or 0), started=started)

    def replacement_pending(self) -> bool:
        with self._cond:
            if any(p.info.state is NodeState.STARTING for p in self._pods.values()):
                return True
            now = time.time()
            return any(now - at < REPLACEMENT_WINDOW_S for at in self._lost_at.values())

    def wait_all_gone(self, timeout_s: float) -> bool:
        """Block until no pod of the run is alive (or ``timeout_s``); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while any(p.info.state.is_alive() for p in self._pods.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def describe(self) -> str:
        """One line per pod: phase, machine, and why it is not running."""
        with self._cond:
            return "; ".join(f"{name}: {_why(p.obj)}" for name, p in self._pods.items())


def _ended_for_good(obj: K8sObject, final: Callable[[int | None], bool]) -> int | None:
    """The exit code of a worker container whose agent ended for good (``final``), from its
    current state (exited, not yet restarted) or its last one (restarted to stay down)."""
    st = _container_status(obj)
    for state in (st.get("state") or {}, st.get("lastState") or {}):
        terminated = state.get("terminated")
        if terminated and final(terminated.get("exitCode")):
            return int(terminated["exitCode"])
    return None


def _why(obj: K8sObject) -> str:
    status = obj.get("status") or {}
    text = str(status.get("phase") or "unknown")
    machine = (obj.get("spec") or {}).get("nodeName")
    if machine:
        text += f" on {machine}"
    waiting = (_container_status(obj).get("state") or {}).get("waiting") or {}
    if waiting:
        text += f" ({waiting.get('reason')}: {waiting.get('message', '')})".replace(": )", ")")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            text += f" ({cond.get('reason')}: {cond.get('message')})"
    return text


class MachineTracker:
    """Kubernetes nodes: readiness and schedulability, changes as ``machine_*`` events."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self._state: dict[str, tuple[bool, bool]] = {}
        self._initial = True
        self._lock = threading.Lock()

    def initial_done(self) -> None:
        """The first list is in: from now on, every change is news."""
        self._initial = False

    def on_event(self, kind: str, obj: K8sObject) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        with self._lock:
            prev = self._state.pop(name, None) if kind == "DELETED" else self._state.get(name)
            now = (_ready(obj), bool((obj.get("spec") or {}).get("unschedulable")))
            if kind != "DELETED":
                self._state[name] = now
        if self._initial:
            return
        if kind == "DELETED":
            self.timeline.emit(NodeEv.MACHINE_DELETED, None, OnMachine(machine=name))
        elif prev is None:
            self.timeline.emit(NodeEv.MACHINE_ADDED, None, OnMachine(
                machine=name, ready=now[0], labels=(obj.get("metadata") or {}).get("labels") or {}))
        else:
            if now[0] != prev[0]:
                self.timeline.emit(NodeEv.MACHINE_READY if now[0] else NodeEv.MACHINE_NOT_READY, None,
                                   OnMachine(machine=name))
            if now[1] != prev[1]:
                self.timeline.emit(NodeEv.MACHINE_CORDONED if now[1] else NodeEv.MACHINE_UNCORDONED, None,
                                   OnMachine(machine=name))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._state)

    def ready(self, name: str) -> bool | None:
        with self._lock:
            state = self._state.get(name)
            return state[0] if state else None


def _ready(obj: K8sObject) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
