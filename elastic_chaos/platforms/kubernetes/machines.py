"""The machines under a cluster's pods, operated by whoever owns them: the contract and the local cluster's.

A Kubernetes node fault that is more than an API call (the instance is gone,
its link is down, it hangs) and the node pool's replacement (a new instance
joins, the cluster-autoscaler's part) need the machines' owner: a cloud (EC2
and its Auto Scaling groups on EKS), Docker for kind, or the local cluster's
own operations (``make cluster-up``). The Kubernetes platform talks to them
through :class:`Machines`; an operation an owner cannot do is ``unavailable``
with the reason (a scenario skips with it), never replaced by another fault.

- :class:`LocalClusterMachines`: elastic_chaos.localcluster.ops,
  in this process (root): ``lose`` SIGKILLs the node's PID namespace (kubelet,
  containerd, every container at once) and deletes its Node; ``add`` starts a
  new kubelet + containerd and returns once it is Ready; ``partition`` takes
  its link down; ``freeze`` freezes its cgroup; ``link_end`` says where a link fault
  shapes its traffic with the other machines (its namespace, address, pod range, veth).
- kind's (``docker kill``/``docker start``) live in elastic_chaos.platforms.kubernetes.kind_cluster.
- :class:`NoMachines`: a cluster whose machines are not ours; the node faults
  fall back to what the API can do (delete the pod) where the fault says so.
"""
from __future__ import annotations

import abc
import contextlib
import enum
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from elastic_chaos.errors import FaultUnavailable, InjectionFailed
from elastic_chaos.host import links
from elastic_chaos.platforms.slowdown import FreezerFileSwitch, Switch


class MachineOp(enum.Enum):
    """What can be done to a machine."""

    LOSE = "losing a machine"
    ADD = "adding a machine"
    PARTITION = "partitioning a machine"
    FREEZE = "freezing a machine"
    SLOW = "slowing a machine down (a freeze and thaw several times a second)"
    LINK = "degrading the link between machines (their pods' traffic: loss, delay, a rate cap, flaps)"


class Machines(abc.ABC):
    """Operations on the machines (Kubernetes nodes) of one cluster. Every method blocks until
    done and raises InjectionFailed when the owner refused or failed, FaultUnavailable when
    it cannot do that at all (``unavailable`` says why beforehand)."""

    name: str = "abstract"

    @abc.abstractmethod
    def unavailable(self, op: MachineOp) -> str | None:
        """Why ``op`` cannot be done on this cluster's machines, or None when it can."""

    def require(self, op: MachineOp) -> None:
        reason = self.unavailable(op)
        if reason is not None:
            raise FaultUnavailable(reason)

    def lose(self, machine: str, *, once_dead: Callable[[], None] | None = None) -> float:
        """The instance is gone: every process on it dies at once and its Node object goes.
        ``once_dead`` runs after the processes died and before the Node goes (while no
        controller replaces the machine's pods yet). Returns when it is gone (epoch seconds
        of the hit). Not idempotent: a gone machine fails."""
        self.require(MachineOp.LOSE)
        return self._lose(machine, once_dead)

    def add(self) -> str:
        """A new machine joins the cluster; blocks until its Node is Ready; returns its name."""
        self.require(MachineOp.ADD)
        return self._add()

    def add_many(self, count: int) -> list[str]:
        """``count`` new machines (joining side by side where the owner can); blocks until all are Ready."""
        return [self.add() for _ in range(count)]

    def partition(self, machine: str, *, on: bool = True) -> float:
        """Cut the machine's link (``on``) or restore it; its processes keep running. Idempotent."""
        self.require(MachineOp.PARTITION)
        return self._partition(machine, on)

    def freeze(self, machine: str, *, on: bool = True) -> float:
        """Stop (``on``) or resume every process of the machine at once (a hung host). Idempotent."""
        self.require(MachineOp.FREEZE)
        return self._freeze(machine, on)

    def slow_switch(self, machine: str) -> Switch:
        """What stops and continues every process of the machine, fast enough for a straggler's
        duty cycle (elastic_chaos.platforms.slowdown)."""
        self.require(MachineOp.SLOW)
        return self._slow_switch(machine)

    def link_end(self, machine: str) -> links.End:
        """Where the traffic between ``machine`` (and the pods it routes) and the other machines
        can be shaped (elastic_chaos.host.links): its network namespace, address, pod range and
        host-side veth. A read: nothing is changed."""
        self.require(MachineOp.LINK)
        return self._link_end(machine)

    def pod_processes(self, machine: str, pod_uid: str) -> dict[int, str] | None:
        """PID -> command name of the processes of pod ``pod_uid`` on ``machine``, as the
        machine itself sees them (not the kubelet's report, which a busy 1.20 kubelet
        published more than 20 s late); None where the machines cannot be looked into."""
        return None

    def _lose(self, machine: str, once_dead: Callable[[], None] | None) -> float:
        raise FaultUnavailable(f"{MachineOp.LOSE.value} is not possible on {self.name} machines")

    def _add(self) -> str:
        raise FaultUnavailable(f"{MachineOp.ADD.value} is not possible on {self.name} machines")

    def _partition(self, machine: str, on: bool) -> float:
        raise FaultUnavailable(f"{MachineOp.PARTITION.value} is not possible on {self.name} machines")

    def _freeze(self, machine: str, on: bool) -> float:
        raise FaultUnavailable(f"{MachineOp.FREEZE.value} is not possible on {self.name} machines")

    def _slow_switch(self, machine: str) -> Switch:
        raise FaultUnavailable(f"{MachineOp.SLOW.value} is not possible on {self.name} machines")

    def _link_end(self, machine: str) -> links.End:
        raise FaultUnavailable(f"{MachineOp.LINK.value} is not possible on {self.name} machines")


class NoMachines(Machines):
    """A cluster whose machines this run cannot reach (any cluster without a profile that names
    their owner): only what the Kubernetes API itself can do."""

    name = "this cluster's"

    def unavailable(self, op: MachineOp) -> str | None:
        return (f"{op.value} needs the machines' owner, and this cluster names none (the local cluster of "
                "`make cluster-up` does; on kind use stop-kind-node, on EKS the eks platform)")


class LocalClusterMachines(Machines):
    """The local cluster's nodes (elastic_chaos.localcluster), operated in this process."""

    name = "the local cluster's"

    def __init__(self, root: str | Path) -> None:
        from elastic_chaos.localcluster.base import Layout
        self.layout = Layout(Path(root))

    def unavailable(self, op: MachineOp) -> str | None:
        if os.geteuid() != 0:
            return f"{op.value} on the local cluster needs root (its nodes are root's namespaces and cgroups)"
        if not self.layout.state_file.exists():
            return f"the local cluster at {self.layout.root} is not running (make cluster-up)"
        return None

    def pod_processes(self, machine: str, pod_uid: str) -> dict[int, str] | None:
        if self.unavailable(MachineOp.LOSE) is not None:
            return None
        from elastic_chaos.localcluster import ops
        return ops.pod_pids(self.layout, machine, pod_uid)

    def _lose(self, machine: str, once_dead: Callable[[], None] | None) -> float:
        from elastic_chaos.localcluster import ops
        with _failed_loudly(f"losing {machine}"):
            return ops.lose_node(self.layout, machine, once_dead=once_dead)   # when its processes were gone

    def _add(self) -> str:
        from elastic_chaos.localcluster import ops
        with _failed_loudly("adding a node"):
            return ops.add_node(self.layout, wait=True)

    def add_many(self, count: int) -> list[str]:
        """Started one after the other (a second each), then waited for together (~7 s)."""
        self.require(MachineOp.ADD)
        from elastic_chaos.localcluster import ops
        with _failed_loudly(f"adding {count} nodes"):
            names = [ops.add_node(self.layout, wait=False) for _ in range(count)]
            ops.wait_ready(self.layout, names)
        return names

    def _partition(self, machine: str, on: bool) -> float:
        from elastic_chaos.localcluster import ops
        at = time.time()
        with _failed_loudly(f"{'partitioning' if on else 'healing'} {machine}"):
            ops.set_partition(self.layout, machine, partitioned=on)
        return at

    def _freeze(self, machine: str, on: bool) -> float:
        from elastic_chaos.localcluster import ops
        at = time.time()
        with _failed_loudly(f"{'freezing' if on else 'thawing'} {machine}"):
            ops.set_frozen(self.layout, machine, frozen=on)
        return at

    def _slow_switch(self, machine: str) -> Switch:
        from elastic_chaos.localcluster import ops
        with _failed_loudly(f"slowing {machine} down"):
            return FreezerSwitch(ops.freezer_state(self.layout, machine))

    def _link_end(self, machine: str) -> links.End:
        """The node's own namespace (its init's), its bridge address and the pod range it routes
        (pods keep their addresses across machines: no masquerade), its veth on the host bridge."""
        from elastic_chaos.localcluster import ops
        with _failed_loudly(f"reading {machine}'s link"):
            nl = ops.node_link(self.layout, machine)
        return links.End(machine, nl.netns, nl.address, nl.host_veth, routes=(nl.pod_cidr,))


class FreezerSwitch(FreezerFileSwitch):
    """A local-cluster machine's cgroup v1 freezer (``freezer.state``): the whole machine stops,
    kubelet, containerd and its pods, like a host whose hypervisor gives it half of its CPU."""

    def __init__(self, state_file: Path) -> None:
        super().__init__(state_file, stop="FROZEN", cont="THAWED", how="machine freezer duty cycle")


@contextlib.contextmanager
def _failed_loudly(what: str) -> Iterator[None]:
    """A ClusterError of the local cluster as InjectionFailed, saying what was being done."""
    from elastic_chaos.localcluster.base import ClusterError
    try:
        yield
    except ClusterError as exc:
        raise InjectionFailed(f"{what} failed: {exc}") from exc
