"""Recovery after kill-node, spot-interruption and partition, per backend and preset; and on a cluster.

One job per case (2 nodes, no automatic replacement). Each repetition hits the
newest node, waits until the survivor trains again alone (the measured
recovery), removes what is left of the victim, adds a node back and waits for
the world to regrow before the next repetition. So every repetition measures
the same thing: one survivor re-forming alone.

The ``cluster:`` cases run the same on the local Kubernetes cluster (``make
cluster-up``; skipped with the reason when it is not up): kill-node there loses
the machine under the pod, delete-pod deletes it with grace 0, spot-interruption
sends the notices, drains and loses the machine; adding a node back scales the
StatefulSet up (and adds a machine when none is free).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import summary
from elastic_chaos.analysis.recovery import PHASES, Recovery
from elastic_chaos.errors import ChaosError
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults import KillNode, Partition, ScaleUp, SpotInterruption
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.kubernetes import DeletePod
from elastic_chaos.host import netns
from elastic_chaos.platforms.local.platform import LocalOptions, NetworkMode
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, PgBackend, RdzvBackend, RendezvousSpec, preset

log = logging.getLogger(__name__)

FAULTS: dict[str, Callable[[], Fault]] = {
    "kill-node": lambda: KillNode(),
    "spot-interruption": lambda: SpotInterruption(rebalance_lead_s=1.0, notice_s=2.0, grace_s=20.0),
    "partition": lambda: Partition(),
    "delete-pod": lambda: DeletePod(),
}

CLUSTER_KUBECONFIG = Path(".cluster/kubeconfig")
"""The local cluster's (make cluster-up), relative to where the bench runs (the repository)."""


@dataclass(frozen=True)
class Case:
    backend: str
    preset: str
    fault: str
    pg_backend: PgBackend = PgBackend.GLOO
    """The process group's backend: gloo for the CPU figures even on a GPU machine; NCCL for
    bench/gpu.py's."""
    platform: str = "local"
    """``local``, or ``cluster``: the kubernetes platform on the local cluster."""
    leave_on_sigterm: bool = False
    """The departing node leaves the rendezvous on SIGTERM (JobSpec.leave_on_sigterm): key suffix ``+leave``."""

    @property
    def key(self) -> str:
        where = "" if self.platform == "local" else f"{self.platform}:"
        return f"{where}{self.backend}/{self.preset}/{self.fault}{LEAVE_SUFFIX if self.leave_on_sigterm else ''}"


LEAVE_SUFFIX = "+leave"


def unavailable(case: Case) -> str | None:
    if case.platform == "cluster":
        if not CLUSTER_KUBECONFIG.exists():
            return (f"no local cluster ({CLUSTER_KUBECONFIG} is missing): make cluster-up, then "
                    "python -m bench --only 'cluster:*' --merge")
        return None if is_root() else "the local cluster's machine faults need root"
    if case.fault == "partition":
        return netns.unavailable_reason()
    return None


def _platform(case: Case) -> tuple[str, Any]:
    """The platform name and options of a case's ChaosRun."""
    if case.platform == "cluster":
        from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
        return "kubernetes", KubernetesOptions(kubeconfig=str(CLUSTER_KUBECONFIG.resolve()), replace_lost_nodes=False)
    network = NetworkMode.ISOLATED if case.fault == "partition" else NetworkMode.HOST
    return "local", LocalOptions(replace_lost_nodes=False, network=network)


@dataclass
class CaseRun:
    recoveries: list[Recovery]
    problems: list[str]
    """Why the case stopped early (a timeout, a split brain), if it did."""
    departed_exit_s: list[float] = field(default_factory=list)
    """Graceful faults: how long the hit node took to exit after SIGTERM (its teardown shares this
    machine's cores with the survivors' restart)."""


def run_case(case: Case, reps: int, out: Path, say: Callable[[str], None]) -> CaseRun:
    job = preset(case.preset).apply(JobSpec(nodes="1:2", checkpoint_every=20, step_time=0.1, max_restarts=100,
                                            rdzv=RendezvousSpec(backend=RdzvBackend(case.backend)),
                                            backend=case.pg_backend, leave_on_sigterm=case.leave_on_sigterm))
    platform, options = _platform(case)
    result = CaseRun([], [])
    timeout = 240.0
    with ChaosRun(out / run_folder(case), scenario=f"bench {case.key}", platform=platform,
                  options=options) as run:
        try:
            run.start(job)
            run.wait_for_step(30, timeout=timeout)
            for i in range(reps):
                rec, fault = _one_repetition(run, case, timeout, last=i + 1 == reps)
                result.recoveries.append(rec)
                exited = (fault.hit.detail or {}).get("exited_within_grace_s") if fault.hit else None
                if isinstance(exited, (int, float)):
                    result.departed_exit_s.append(float(exited))
                say(f"  {case.key} #{i + 1}: recovery {_s(rec.recovery_s)} "
                    f"({', '.join(f'{p} {v:.1f}' for p, v in rec.phases.items() if v is not None)})")
                if run.split_brains():
                    raise SplitBrainSeen(run.split_brains()[0].describe())
        except (ChaosError, SplitBrainSeen) as exc:
            result.problems.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            say(f"  {case.key}: stopped early: {result.problems[-1]}")
    return result


class SplitBrainSeen(Exception):
    pass


def _one_repetition(run: ChaosRun, case: Case, timeout: float, *, last: bool) -> tuple[Recovery, FaultRecord]:
    """Hit the newest node, measure the survivor's recovery, then regrow to 2 nodes."""
    fault = hit = run.inject(FAULTS[case.fault]())
    rec = run.wait_for_recovery(fault, timeout=timeout)
    if not last:
        if fault.target in {n.name for n in run.platform.alive_nodes()}:
            run.platform.kill_node(fault.target)       # a partitioned node: take it away for good
        if len(run.platform.alive_nodes()) < 2:
            fault = run.inject(ScaleUp())
        # (a deleted pod is re-created by its controller at once: the world regrows by itself)
        run.wait_for_world_size(fault, 2, timeout=timeout)
        run.wait_for_steps(10, timeout=timeout)
    return rec, hit


def run_folder(case: Case) -> str:
    return case.key.replace("/", "_").replace(":", "-")


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def case_result(case_run: CaseRun, floor_s: float | None) -> dict[str, Any]:
    recs = case_run.recoveries
    out: dict[str, Any] = {p: summary(r.phases.get(p) for r in recs) for p in PHASES}
    out["problems"] = case_run.problems
    out["recovery_s"] = summary(r.recovery_s for r in recs)
    out["regain_s"] = summary(r.regain_s for r in recs)
    out["lost_steps"] = summary(r.lost_steps for r in recs)
    median = out["recovery_s"]["median"]
    out["ratio_to_floor"] = round(median / floor_s, 2) if median is not None and floor_s else None
    if case_run.departed_exit_s:
        out["departed_exit_s"] = summary(case_run.departed_exit_s)
    return out


def cases(quick: bool) -> list[Case]:
    if quick:  # the spot pair (without / with leaving the rendezvous) in place of kill-node: about 1.5 minutes
        return spot_pair("etcd-v2")
    backends = ("etcd-v2", "c10d")
    presets = ("default", "fast")
    faults = ("kill-node", "spot-interruption", "partition")
    local = [Case(b, p, f) for b in backends for p in presets for f in faults]
    leaving = [Case(b, "fast", "spot-interruption", leave_on_sigterm=True) for b in backends]
    return local + leaving + [Case("etcd-v2", "fast", f, platform="cluster") for f in CLUSTER_FAULTS]


def spot_pair(backend: str) -> list[Case]:
    """A spot interruption with the fast preset, without and with the departing node leaving the rendezvous."""
    return [Case(backend, "fast", "spot-interruption"),
            Case(backend, "fast", "spot-interruption", leave_on_sigterm=True)]


CLUSTER_FAULTS = ("kill-node", "delete-pod", "spot-interruption")
"""Measured on the local cluster beside the local platform (etcd-v2, fast preset: what the catalog runs)."""


def is_root() -> bool:
    return os.geteuid() == 0
