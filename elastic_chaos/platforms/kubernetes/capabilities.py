"""What a Kubernetes platform can do to its job besides losing a node: its capabilities' implementations.

Each delegates to elastic_chaos.platforms.kubernetes.node_faults.NodeFaults (the faults below the
API: machines, spot-notice stand-in, commands in pods, the job's scale) and asks it why
it cannot act here and now (``NodeFaults.unavailable``: no machines we operate, no
metadata address the pods can reach, an etcd image without a shell, ...).
"""
from __future__ import annotations

from typing import Protocol

from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.capabilities import StoreOutage
from elastic_chaos.platforms.kubernetes.node_faults import NodeFaults
from elastic_chaos.platforms.nodes import Hit, NodeInfo
from elastic_chaos.platforms.storage import LayerStorage, StorageLayer


class KubeHost(caps.Host, Protocol):
    """What the Kubernetes capabilities need of their platform (KubernetesPlatform is one)."""

    node_faults: NodeFaults
    storage_layer: StorageLayer | None

    def storage_unavailable(self) -> str | None:
        """Why the job's checkpoint folder cannot be behind the storage layer here (None: it can)."""


class _OnKube(caps.Capability):
    platform: KubeHost

    def unavailable(self) -> str | None:
        return self.platform.node_faults.unavailable(caps.kind_of(self))

    @property
    def faults(self) -> NodeFaults:
        return self.platform.node_faults


class Notices(_OnKube, caps.NoticeSender):
    def _send(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        return self.faults.send_notice(node, kind, terminate_at=terminate_at)


class Partitions(_OnKube, caps.Partitioner):
    def _cut(self, node: str) -> Hit:
        return self.faults.partition(node, on=True)

    def _heal(self, node: str) -> Hit:
        return self.faults.partition(node, on=False)


class Freezes(_OnKube, caps.Freezer):
    def _freeze(self, node: str) -> Hit:
        return self.faults.freeze(node, on=True)

    def _thaw(self, node: str) -> Hit:
        return self.faults.freeze(node, on=False)


class WorkerKills(_OnKube, caps.WorkerKiller):
    def _kill(self, node: str, *, local_rank: int) -> Hit:
        return self.faults.kill_worker(node, local_rank=local_rank)


class ScaleUp(_OnKube, caps.NodeAdder):
    def _add(self) -> NodeInfo:
        return self.faults.add_node()


class Etcd(_OnKube, caps.StoreStopper):
    def _stop(self, *, how: StoreOutage) -> Hit:
        return self.faults.stop_store(how)

    def _start(self) -> Hit:
        return self.faults.start_store()


class StoreHost(_OnKube, caps.StoreHost):
    pass


class Slowdown(_OnKube, caps.Slower):
    def _slow(self, node: str, *, factor: float, period_s: float) -> Hit:
        return self.faults.slow(node, factor=factor, period_s=period_s)

    def _restore(self, node: str) -> Hit:
        return self.faults.restore(node)


class Hangs(_OnKube, caps.WorkerHanger):
    def _hang(self, node: str, *, local_rank: int) -> Hit:
        return self.faults.hang_worker(node, local_rank=local_rank)

    def _resume(self, node: str, pid: int) -> Hit:
        return self.faults.resume_worker(node, pid)


class Links(_OnKube, caps.LinkDegrader):
    def _degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                 down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                 to_store: bool, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                 burst: float | None = None) -> Hit:
        return self.faults.links.degrade(node, peers, loss=loss, rate_kbit=rate_kbit, down_s=down_s, up_s=up_s,
                                         delay_ms=delay_ms, jitter_ms=jitter_ms, to_store=to_store,
                                         reverse_delay_ms=reverse_delay_ms, reverse_jitter_ms=reverse_jitter_ms,
                                         burst=burst)

    def _restore(self, node: str, link: str) -> Hit:
        return self.faults.links.restore(node, link)


class Storage(LayerStorage):
    """The storage layer on the host folder the pods' checkpoint volume binds (the local cluster's)."""

    platform: KubeHost

    def unavailable(self) -> str | None:
        return self.platform.storage_unavailable() or super().unavailable()


def kubernetes_capabilities(host: KubeHost) -> tuple[caps.Capability, ...]:
    """Every capability a Kubernetes platform offers (each may be unavailable on a given cluster)."""
    return (Notices(host), Partitions(host), Freezes(host), WorkerKills(host), ScaleUp(host), Etcd(host),
            StoreHost(host), Slowdown(host), Hangs(host), Storage(host), Links(host))
