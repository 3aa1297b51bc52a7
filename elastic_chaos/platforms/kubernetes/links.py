"""Degraded links between the machines under a job's pods, where we operate them (the local cluster).

A job's node is a pod; the link between two of them is the link between the machines they run
on. Each local-cluster machine is a network namespace whose ``eth0`` sits on the host bridge and
routes its own pod range; pods keep their addresses across machines (no masquerade). So the
local platform's machinery makes the same faults here (elastic_chaos.platforms.linkbook over
elastic_chaos.host.links): in each machine's namespace, a chain jumped to from INPUT and FORWARD
on ``eth0`` whose rules match the other machine's address and pod range (drops, the delay line's
queue, which also makes a bursty loss; each machine's reader holds what it receives, so a delay
may differ per direction); HTB on each machine's ``eth0`` and its host-side veth for a rate cap. Every pod on those
machines shares the degraded link, the job's etcd too if it runs on one of them, as they would
share a real machine's NIC. The probe runs between the two machines' own addresses, through the
same rules (INPUT), before and after the fault bites.

What is made is held by name until the fault's revert (or the platform's stop) removes it and
checks that no chain, queue or qdisc of it is left. The machines outlive the run, so nothing of
it may be left behind there; a machine that was lost meanwhile took its share with it.

Elsewhere it is unavailable, with the reason: a cluster whose machines we do not operate has no
namespace we may enter (kind's containers, EKS's instances: there FIS's
``aws:eks:pod-network-latency`` / ``aws:eks:pod-network-packet-loss`` are the route).
"""
from __future__ import annotations

import os
import shutil
from typing import Protocol

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.host import links
from elastic_chaos.platforms.kubernetes.machines import MachineOp, Machines
from elastic_chaos.platforms.linkbook import LinkBook
from elastic_chaos.platforms.nodes import Hit, NodeInfo
from elastic_chaos.spec import JobSpec


class LinkHost(Protocol):
    """What machine links need of their platform (KubernetesPlatform is one)."""

    machine_ops: Machines
    job: JobSpec | None

    def machine_of(self, pod: str) -> str: ...

    def alive_nodes(self) -> list[NodeInfo]: ...


class MachineLinks:
    """The links between machines one Kubernetes run degraded, by name."""

    def __init__(self, platform: LinkHost) -> None:
        self.p = platform
        self._book: LinkBook | None = None

    @property
    def book(self) -> LinkBook:
        """Named after the run (chains ``EC-k<run>-<n>``) with queue numbers of this process's own,
        so that two runs on one cluster never take each other's (the machines are shared)."""
        if self._book is None:
            run = self.p.job.run_id.rsplit("-", 1)[-1][:6] if self.p.job is not None else "x"
            self._book = LinkBook(f"k{run}-", first_queue=1000 + (os.getpid() % 600) * 100)
        return self._book

    def unavailable(self) -> str | None:
        """Why links between this cluster's machines cannot be degraded here (None: they can)."""
        reason = self.p.machine_ops.unavailable(MachineOp.LINK) or links.unavailable_reason()
        if reason is None and shutil.which("nsenter") is None:
            reason = "`nsenter` is not installed (apt-get install util-linux): it enters the machines' namespaces"
        return reason

    def degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                to_store: bool, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                burst: float | None = None) -> Hit:
        """Degrade the link between the machine under pod ``node`` and the machines under ``peers``
        (every other live pod's when empty). Blocks for the probes. InjectionFailed when a peer
        shares the node's machine (no link between them) or a machine cannot be reached."""
        if to_store:
            raise InjectionFailed(
                "--to-store is made on the local platform only (its nodes reach etcd through a relay whose port "
                "is degraded); on the cluster, degrade the link to the machine that runs the store instead: "
                "--between NODE POD, POD a pod on that machine")
        if not peers:
            peers = tuple(n.name for n in self.p.alive_nodes() if n.name != node)
        if not peers:
            raise InjectionFailed(f"{node} has no live peer to degrade its link to")
        if node in peers:
            raise InjectionFailed(f"{node} cannot be its own peer")
        machine = self.p.machine_of(node)
        theirs = {p: self.p.machine_of(p) for p in peers}
        shared = [p for p, m in theirs.items() if m == machine]
        if shared:
            raise InjectionFailed(f"{', '.join(shared)} run(s) on {machine} with {node}: their traffic never leaves "
                                  "the machine, there is no link between them to degrade")
        distinct = tuple(dict.fromkeys(theirs.values()))
        end = self.p.machine_ops.link_end(machine)
        others = tuple(self.p.machine_ops.link_end(m) for m in distinct)
        return self.book.degrade(node, end, others, peers, loss=loss, rate_kbit=rate_kbit, down_s=down_s,
                                 up_s=up_s, delay_ms=delay_ms, jitter_ms=jitter_ms, reverse_delay_ms=reverse_delay_ms,
                                 reverse_jitter_ms=reverse_jitter_ms, burst=burst,
                                 detail={"machine": machine, "peer_machines": list(distinct)})

    def restore(self, node: str, link: str) -> Hit:
        """Remove what ``degrade`` made for ``link`` and check none of it is left; idempotent."""
        return self.book.restore(node, link, _present)

    def release_all(self) -> list[str]:
        """Teardown: every link this run still degrades restored; what could not be, in words."""
        return self.book.release_all(_present) if self._book is not None else []


def _present(end: links.End) -> bool:
    """A machine's namespace is there while its init runs (a lost machine took its rules with it)."""
    return links.netns_exists(end.netns)
