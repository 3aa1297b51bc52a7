"""The kind platform: the Kubernetes platform with kind/'s defaults, plus machines as containers.

``make kind-up`` creates the cluster kind/cluster.yaml describes (context
``kind-elastic-chaos``), loads the trainer image, installs the ElasticJob CRD
and controller. Its worker nodes are Docker containers, so a machine can be
taken away for real (:class:`KindMachines`, the machines contract of
elastic_chaos.platforms.kubernetes.machines): ``docker kill`` and the Node deleted
(the instance is gone: kill-node), ``docker pause`` (freeze: the cgroup
freezer), ``docker network disconnect`` (partition); and, as the
``stop-kind-node`` fault, ``docker kill``/``docker stop`` undone with
``docker start``. kind cannot add a node to a running cluster: its node pool
does not replace lost machines (the controller re-creates the pod elsewhere).
"""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import FaultUnavailable, InjectionFailed
from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import Lost
from elastic_chaos.options import option
from elastic_chaos.platforms.api import Hit
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.actions import ClusterActions
from elastic_chaos.platforms.kubernetes.machines import MachineOp, Machines
from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
from elastic_chaos.platforms.kubernetes.platform import KubernetesPlatform

CLUSTER = "elastic-chaos"
NETWORK = "kind"
"""The Docker network kind puts its node containers on."""


class KindMachines(Machines):
    """kind's nodes are containers named after them: lose = ``docker kill`` + delete the Node,
    freeze = ``docker pause``, partition = disconnect from the ``kind`` network. No ``add``."""

    name = "kind's"

    def __init__(self, docker: str, actions: ClusterActions) -> None:
        self.docker, self.actions = docker, actions

    def unavailable(self, op: MachineOp) -> str | None:
        if op is MachineOp.ADD:
            return "kind cannot add a node to a running cluster (make kind-up makes them all)"
        if op is MachineOp.LINK:
            return ("kind's nodes are Docker containers on Docker's network: link faults between them are not made "
                    "(the local cluster of `make cluster-up` has them: --platform kubernetes --kubeconfig "
                    ".cluster/kubeconfig)")
        if op is MachineOp.SLOW:
            return (f"a kind node stops only by `{self.docker} pause`, one command per stop: too slow for a "
                    "straggler's duty cycle (several stops a second)")
        if shutil.which(self.docker) is None:
            return f"{self.docker} is not on PATH: kind's nodes are its containers"
        return None

    def command(self, verb: str, machine: str) -> list[str]:
        """The runtime command for a kind node: its container is named after the node."""
        if verb in ("connect", "disconnect"):
            return [self.docker, "network", verb, NETWORK, machine]
        return [self.docker, verb, machine]

    def run(self, verb: str, machine: str) -> None:
        if shutil.which(self.docker) is None:
            raise FaultUnavailable(f"{self.docker} is not on PATH: stopping a kind node needs the container "
                                   "runtime kind runs on (set KindOptions.docker for podman)")
        cmd = self.command(verb, machine)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired as exc:
            raise InjectionFailed(f"`{' '.join(cmd)}` did not finish in 60 s") from exc
        if done.returncode != 0:
            raise InjectionFailed(f"`{' '.join(cmd)}` failed ({done.returncode}): "
                                  f"{(done.stderr or done.stdout).strip()[:300]} -- is {machine} a node of the "
                                  f"kind cluster `{CLUSTER}` (kind get nodes --name {CLUSTER})?")

    def _lose(self, machine: str, once_dead: Callable[[], None] | None) -> float:
        at = time.time()
        self.run("kill", machine)
        try:
            if once_dead is not None:
                once_dead()
        finally:
            self.actions.delete_node(machine)    # a cloud's node lifecycle controller's part
        return at

    def _partition(self, machine: str, on: bool) -> float:
        at = time.time()
        self.run("disconnect" if on else "connect", machine)
        return at

    def _freeze(self, machine: str, on: bool) -> float:
        at = time.time()
        self.run("pause" if on else "unpause", machine)
        return at


@dataclass(frozen=True)
class KindOptions(KubernetesOptions):
    """KubernetesOptions with kind/'s defaults, and the container runtime to stop nodes with."""

    context: str | None = option(f"kind-{CLUSTER}", "kubeconfig context of the kind cluster",
                                 flag="--kube-context", metavar="NAME")
    settings: m.KubeSettings = field(default_factory=m.kind_settings)
    etcd_endpoint: str | None = option("127.0.0.1:32379", "HOST:PORT of the job's etcd (kind/cluster.yaml maps "
                                                          "the etcd NodePort 32379 to the host)", metavar="HOST:PORT")
    docker: str = option("docker", "the container runtime kind runs its nodes in (docker, podman)")


class KindPlatform(KubernetesPlatform):
    name = "kind"
    Options = KindOptions

    def __init__(self, timeline: Timeline, work_dir: Path, options: KindOptions | None = None,
                 **clients: Any) -> None:
        self.kind_options = options or KindOptions()
        super().__init__(timeline, work_dir, self.kind_options, **clients)
        self.kind_machines = KindMachines(self.kind_options.docker, self.actions)
        self.machine_ops = self.kind_machines

    def container_command(self, verb: str, machine: str) -> list[str]:
        """The runtime command for a kind node: its container is named after the node."""
        return self.kind_machines.command(verb, machine)

    def stop_machine(self, machine: str, *, graceful: bool = False) -> Hit:
        """Take a kind node away: ``docker kill`` (hard) or ``docker stop`` (SIGTERM, then
        SIGKILL after 10 s). Blocks until the runtime says it is stopped."""
        at = time.time()
        pods = self.pods_on(machine)
        self._run("stop" if graceful else "kill", machine)
        for pod in pods:
            self.timeline.emit(NodeEv.LOST, pod, Lost(action="stop-kind-node", machine=machine), t=at)
        return Hit(node=machine, at=at, action="docker-stop" if graceful else "docker-kill", detail={"pods": pods})

    def start_machine(self, machine: str) -> Hit:
        """Start a stopped kind node again (its kubelet re-registers). Idempotent."""
        at = time.time()
        self._run("start", machine)
        return Hit(node=machine, at=at, action="docker-start")

    def _run(self, verb: str, machine: str) -> None:
        self.kind_machines.run(verb, machine)
