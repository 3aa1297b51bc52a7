"""The kind platform: the Kubernetes platform with kind/'s defaults, plus machines as containers.

``make kind-up`` creates the cluster kind/cluster.yaml describes (context
``kind-elastic-chaos``), loads the trainer image, installs the ElasticJob CRD
and controller. Its worker nodes are Docker containers, so a machine can be
taken away for real: ``docker kill`` (spot reclaim: the kubelet stops
reporting, the node goes NotReady, its pods are lost) or ``docker stop``
(a graceful shutdown), undone with ``docker start``.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import FaultUnavailable, InjectionFailed
from chaos.events import NodeEv, Timeline
from chaos.options import option
from chaos.platforms.api import Hit
from chaos.platforms.kubernetes import manifests as m
from chaos.platforms.kubernetes.platform import KubernetesOptions, KubernetesPlatform

CLUSTER = "elastic-chaos"


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

    def container_command(self, verb: str, machine: str) -> list[str]:
        """The runtime command for a kind node: its container is named after the node."""
        return [self.kind_options.docker, verb, machine]

    def stop_machine(self, machine: str, *, graceful: bool = False) -> Hit:
        """Take a kind node away: ``docker kill`` (hard) or ``docker stop`` (SIGTERM, then
        SIGKILL after 10 s). Blocks until the runtime says it is stopped."""
        at = time.time()
        pods = self.pods_on(machine)
        self._run("stop" if graceful else "kill", machine)
        for pod in pods:
            self.timeline.emit(NodeEv.LOST, pod, t=at, action="stop-kind-node", machine=machine)
        return Hit(node=machine, at=at, action="docker-stop" if graceful else "docker-kill", detail={"pods": pods})

    def start_machine(self, machine: str) -> Hit:
        """Start a stopped kind node again (its kubelet re-registers). Idempotent."""
        at = time.time()
        self._run("start", machine)
        return Hit(node=machine, at=at, action="docker-start")

    def _run(self, verb: str, machine: str) -> None:
        if shutil.which(self.kind_options.docker) is None:
            raise FaultUnavailable(f"{self.kind_options.docker} is not on PATH: stopping a kind node needs the "
                                   "container runtime kind runs on (set KindOptions.docker for podman)")
        cmd = self.container_command(verb, machine)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired as exc:
            raise InjectionFailed(f"`{' '.join(cmd)}` did not finish in 60 s") from exc
        if done.returncode != 0:
            raise InjectionFailed(f"`{' '.join(cmd)}` failed ({done.returncode}): "
                                  f"{(done.stderr or done.stdout).strip()[:300]} -- is {machine} a node of the "
                                  f"kind cluster `{CLUSTER}` (kind get nodes --name {CLUSTER})?")
