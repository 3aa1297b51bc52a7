"""What the local platform can do to its nodes besides losing one: its capabilities' implementations.

Each is the local way of a capability of elastic_chaos.platforms.capabilities: a notice on the
node's metadata stand-in, a partition on its network namespace (root, ``network=isolated``),
a freeze by its cgroup (or SIGSTOP of its tagged processes without root), a worker
killed or hung by its PID, etcd crashed or hung, a node slowed by a duty cycle over
its cgroup's freezer (or signals), the checkpoint folder's storage layer
(elastic_chaos.platforms.storage). They ask of the platform only what ``LocalHost`` names.
"""
from __future__ import annotations

import os
import signal
import time

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.host import netns, procs
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.capabilities import StoreOutage
from elastic_chaos.platforms.local.links import LocalLinks
from elastic_chaos.platforms.local.local_host import LocalHost
from elastic_chaos.platforms.local.node import LocalNode
from elastic_chaos.platforms.local.slow import CgroupSwitch, SignalSwitch
from elastic_chaos.platforms.nodes import Hit, NodeInfo
from elastic_chaos.platforms.storage import LayerStorage


class _OnLocal(caps.Capability):
    """A capability made on the local platform: it knows the platform as a LocalHost."""

    platform: LocalHost

    def node(self, name: str) -> LocalNode:
        rec = self.platform.record(name)
        if rec is None:
            raise InjectionFailed(f"no node named {name}")
        return rec


class Notices(_OnLocal, caps.NoticeSender):
    def _send(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        imds = self.node(node).imds
        at = time.time()
        if kind == "rebalance":
            imds.recommend_rebalance(at)
        elif kind == "interruption":
            imds.announce_interruption(terminate_at)
        else:
            raise InjectionFailed(f"unknown notice kind {kind!r} (rebalance or interruption)")
        return Hit(node=node, at=at, action=f"notice-{kind}", detail={"endpoint": imds.endpoint})


class Partitions(_OnLocal, caps.Partitioner):
    def unavailable(self) -> str | None:
        reason = netns.unavailable_reason()
        if reason:
            return "partitions need isolated node networking: " + reason
        if not self.platform.isolated():
            return ("partitions need the platform option network=isolated (nodes in their own "
                    "network namespaces); on the host's loopback a dead peer is always answered")
        return None

    def _cut(self, node: str) -> Hit:
        network = self.platform.network
        assert network is not None
        rec = self.node(node)
        at = time.time()
        if rec.relay is not None:
            rec.relay.stall()
        network.partition(node)
        return Hit(node=node, at=at, action="blackhole", detail={"address": rec.address})

    def _heal(self, node: str) -> Hit:
        network, rec = self.platform.network, self.platform.record(node)
        at = time.time()
        if network is None or rec is None or node not in network.nodes:
            return Hit(node=node, at=at, action="nothing-to-heal")
        network.heal(node)
        if rec.relay is not None:
            rec.relay.resume()
        return Hit(node=node, at=at, action="healed")


class Freezes(_OnLocal, caps.Freezer):
    def _freeze(self, node: str) -> Hit:
        rec, cgroups = self.node(node), self.platform.cgroups
        at = time.time()
        if cgroups is not None:
            return Hit(node=node, at=at, action="cgroup.freeze", pids=tuple(sorted(cgroups.freeze(node))))
        pids = procs.stop_tree(rec.tag, first=rec.proc.pid)
        return Hit(node=node, at=at, action="sigstop-all", pids=tuple(sorted(pids)))

    def _thaw(self, node: str) -> Hit:
        rec, cgroups = self.platform.record(node), self.platform.cgroups
        at = time.time()
        if rec is None or not rec.info.state.is_alive():
            return Hit(node=node, at=at, action="nothing-to-thaw")
        if cgroups is not None:
            return Hit(node=node, at=at, action="cgroup.thaw", pids=tuple(sorted(cgroups.thaw(node))))
        return Hit(node=node, at=at, action="sigcont-all",
                   pids=tuple(sorted(procs.signal_tree(rec.tag, signal.SIGCONT))))


class WorkerKills(_OnLocal, caps.WorkerKiller):
    def _kill(self, node: str, *, local_rank: int) -> Hit:
        rec = self.node(node)
        pid = procs.worker_pid(rec.tag, rec.proc.pid, local_rank)
        if pid is None:
            raise InjectionFailed(f"{node} has no running worker with LOCAL_RANK={local_rank} "
                                  "(between restarts, or not started yet)")
        at = time.time()
        os.kill(pid, signal.SIGKILL)
        return Hit(node=node, at=at, action="sigkill-worker", pids=(pid,))


class ScaleUp(_OnLocal, caps.NodeAdder):
    def _add(self) -> NodeInfo:
        return self.platform.spawn_node()


class Etcd(_OnLocal, caps.StoreStopper):
    """The job's etcd: SIGKILLed (crash) or SIGSTOPped (hang), then restarted or continued."""

    def unavailable(self) -> str | None:
        job = self.platform.job
        if job is not None and not job.rdzv.backend.needs_etcd():
            return "the c10d store lives inside a node; use store-host-loss instead"
        return None

    def _stop(self, *, how: StoreOutage) -> Hit:
        etcd = self.platform.etcd
        if etcd is None or not etcd.is_running():
            raise InjectionFailed("this job has no running etcd to stop")
        pid = etcd.pid
        at = time.time()
        if how is StoreOutage.HANG:
            etcd.pause()
        else:
            etcd.kill()
        return Hit(node="etcd", at=at, action="sigstop" if how is StoreOutage.HANG else "sigkill",
                   pids=(pid,) if pid else ())

    def _start(self) -> Hit:
        etcd, guard = self.platform.etcd, self.platform.guard
        if etcd is None:
            raise InjectionFailed("this job has no etcd to start")
        if etcd.paused:
            etcd.resume()
            return Hit(node="etcd", at=time.time(), action="sigcont", pids=(etcd.pid or 0,))
        if etcd.is_running():
            return Hit(node="etcd", at=time.time(), action="already-running", pids=(etcd.pid or 0,))
        etcd.start()
        if guard is not None:
            guard.etcd_started(etcd.pid)
        return Hit(node="etcd", at=time.time(), action="started", pids=(etcd.pid or 0,))


class Slowdown(_OnLocal, caps.Slower):
    """A duty cycle over the node's cgroup freezer (root), else over SIGSTOP/SIGCONT of its processes."""

    def _slow(self, node: str, *, factor: float, period_s: float) -> Hit:
        rec, cgroups = self.node(node), self.platform.cgroups
        switch = CgroupSwitch(cgroups, node) if cgroups is not None else SignalSwitch(rec.tag)
        return self.platform.slowdowns.start(node, factor, period_s, switch)

    def _restore(self, node: str) -> Hit:
        return self.platform.slowdowns.restore(node)


class Hangs(_OnLocal, caps.WorkerHanger):
    def _hang(self, node: str, *, local_rank: int) -> Hit:
        rec = self.node(node)
        return self.platform.hung.hang(node, rec.tag, rec.proc.pid, local_rank)

    def _resume(self, node: str, pid: int) -> Hit:
        return self.platform.hung.resume(node, pid)


def local_capabilities(host: LocalHost) -> tuple[caps.Capability, ...]:
    """Every capability the local platform offers."""
    return (Notices(host), Partitions(host), Freezes(host), WorkerKills(host), ScaleUp(host), Etcd(host),
            caps.StoreHost(host), Slowdown(host), Hangs(host), LayerStorage(host), LocalLinks(host))
