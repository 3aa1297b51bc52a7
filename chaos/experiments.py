"""Ready-made experiments the CLI runs: each a hypothesis about one fault.

The same steps a scenario in ``scenarios/`` takes, parameterised by options,
with the hypothesis checked into a Verdict rather than asserted, so the CLI
can print a table and exit 0/1.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.console import ConsoleProgress
from chaos.faults.node import KillNode
from chaos.platforms.local import LocalOptions
from chaos.scenario import ChaosRun, Verdict
from chaos.spec import JobSpec, RdzvBackend, RendezvousSpec


@dataclass(frozen=True)
class ExperimentOptions:
    """What every CLI experiment accepts."""

    nodes: str = "1:2"
    """Elastic node range MIN:MAX."""
    nproc_per_node: int = 1
    checkpoint_every: int = 20
    step_time: float = 0.1
    steady_steps: int = 50
    """Steps trained before the fault (steady state); between checkpoints by
    default, so the fault costs real progress."""
    replace: bool = True
    """Whether the node pool provisions a replacement for the lost node."""
    provisioning_delay_s: float = 5.0
    rdzv_backend: str = "etcd-v2"
    max_restarts: int = 3
    target: str | None = None
    timeout_s: float = 180.0
    etcd_binary: str | None = None
    report_dir: Path | None = None
    quiet: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def job(self) -> JobSpec:
        return JobSpec(nodes=self.nodes, nproc_per_node=self.nproc_per_node,
                       checkpoint_every=self.checkpoint_every, step_time=self.step_time,
                       max_restarts=self.max_restarts,
                       rdzv=RendezvousSpec(backend=RdzvBackend(self.rdzv_backend)))

    def local(self) -> LocalOptions:
        return LocalOptions(replace_lost_nodes=self.replace,
                            provisioning_delay_s=self.provisioning_delay_s,
                            etcd_binary=self.etcd_binary)


def default_report_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{name}-{stamp}"


def kill_node(opts: ExperimentOptions, *, scenario: str = "kill-node") -> ChaosRun:
    """Hard-kill one node of a steady job; the job must recover within one
    checkpoint interval of progress, and regrow to full size when replaced."""
    report_dir = opts.report_dir or default_report_dir(scenario)
    job = opts.job()
    with ChaosRun(report_dir, scenario=scenario,
                  platform_options={"options": opts.local()}) as run:
        if not opts.quiet:
            ConsoleProgress(run.timeline)
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        fault = run.inject(KillNode(node=opts.target))
        run.wait_for_recovery(fault, timeout=opts.timeout_s)
        full = job.max_nodes * job.nproc_per_node
        if opts.replace:
            run.wait_for_world_size(fault, full, timeout=opts.timeout_s)
        rec = run.recovery(fault)
        v = Verdict()
        v.require(rec.recovered, f"training resumed after the fault ({_s(rec.recovery_s)})")
        v.require(rec.lost_steps is not None and rec.lost_steps <= job.checkpoint_every,
                  f"lost_steps {rec.lost_steps} <= checkpoint interval {job.checkpoint_every}")
        v.require((rec.world_size_after or 0) >= job.min_nodes * job.nproc_per_node,
                  f"world size after recovery {rec.world_size_after} >= min "
                  f"{job.min_nodes * job.nproc_per_node}")
        if opts.replace:
            v.require(rec.world_size_final == full and rec.replacement_s is not None,
                      f"replacement joined: world size back to {full} "
                      f"(replacement_s {_s(rec.replacement_s)})")
        run.verdict = v
    return run


def _s(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f}s"
