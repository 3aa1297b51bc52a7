"""The node pool on a cluster whose machines we operate: a lost machine is replaced after a delay.

The stand-in for the cluster-autoscaler (and the Auto Scaling group under it):
when a fault takes a machine away and the pool replaces lost nodes, a new
machine is asked for ``provisioning_delay_s`` after the loss and joins the
cluster (its kubelet registers, the Node turns Ready). The job's controller
re-creates the lost pod by itself (a StatefulSet once the lost pod's object
is gone: the pod garbage collector takes 40-80 s for a pod on a deleted Node),
and the scheduler puts it on the new machine. The timeline then holds the
replacement's marks, as a game day's does: ``node/provisioning`` (the loss,
the delay), ``node/machine_added`` and ``node/machine_ready`` (from the Node
watch), the replacement pod's ``node/started`` and the rendezvous round it
joins (elastic_chaos.analysis.recovery's provision / join / rejoin split).
"""
from __future__ import annotations

import logging
import threading
import time

from elastic_chaos.errors import ChaosError
from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import Provisioning
from elastic_chaos.platforms.kubernetes.machines import Machines

log = logging.getLogger(__name__)


class MachinePool:
    """Replaces machines lost to faults (when ``replace``), each after ``delay_s``."""

    def __init__(self, machines: Machines, timeline: Timeline, *, replace: bool, delay_s: float | None) -> None:
        self.machines, self.timeline = machines, timeline
        self.replace, self.delay_s = replace, delay_s or 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.added: list[str] = []
        """Machines this pool added, in order."""
        self.errors: list[str] = []

    def lost(self, machine: str, pod: str | None) -> bool:
        """A fault took ``machine`` (and ``pod`` on it) away: ask for a replacement machine after the
        delay when the pool replaces lost nodes. Returns at once; True when one was asked for."""
        if not self.replace:
            return False
        self.timeline.emit(NodeEv.PROVISIONING, None, Provisioning(replaces=pod, machine=machine, delay_s=self.delay_s))
        thread = threading.Thread(target=self._provision, args=(pod,), name=f"provision-for-{machine}",
                                  daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()
        return True

    def _provision(self, pod: str | None) -> None:
        if self._stop.wait(self.delay_s):
            return
        try:
            name = self.machines.add()
        except ChaosError as exc:
            log.warning("the replacement machine did not join: %s", exc)
            self.errors.append(str(exc))
            return
        with self._lock:
            self.added.append(name)
        self.timeline.emit(NodeEv.PROVISIONED, None, Provisioning(replaces=pod, machine=name))

    def pending(self) -> bool:
        """A replacement machine is on its way."""
        with self._lock:
            return any(t.is_alive() for t in self._threads)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask for no more machines; wait for one being added to be Ready (an add is not cut
        short: a half-made node would be left behind). Idempotent."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
