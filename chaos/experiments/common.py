"""What every CLI experiment shares: its options, and opening a run with them.

An experiment is the CLI's form of a scenario: the same steps a test in
``scenarios/`` takes, with the hypothesis checked into a Verdict rather than
asserted, so the CLI can print a table and exit 0/1.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.analysis.observation import checks as observation_checks
from chaos.analysis.observation import log_tails
from chaos.analysis.recovery import Recovery
from chaos.platforms.local.platform import LocalOptions, NetworkMode
from chaos.reporting.live_console import ConsoleProgress
from chaos.runner.run import ChaosRun, JobFailed, Verdict
from chaos.spec import JobSpec, Observation, PgBackend, RdzvBackend, RendezvousSpec, preset


@dataclass(frozen=True)
class ExperimentOptions:
    """What every CLI experiment accepts (each fault reads the fields it needs)."""

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
    preset: str | None = None
    """A named timing preset (chaos.spec.PRESETS: default, fast); explicit knobs override it."""
    rdzv_conf: tuple[tuple[str, Any], ...] = ()
    """Rendezvous knobs (last_call_timeout, keep_alive_interval, ...) set explicitly."""
    max_restarts: int = 3
    target: str | None = None
    timeout_s: float = 180.0
    etcd_binary: str | None = None
    report_dir: Path | None = None
    quiet: bool = False
    network: str = "host"
    """host or isolated (a network namespace per node; root)."""
    pg_timeout_s: float | None = None
    """The trainer's collective timeout (its default: 60 s)."""
    trainer_args: tuple[str, ...] = ()
    duration_s: float | None = None
    """How long a partition/freeze/etcd outage lasts before it is reverted."""
    notice_s: float = 8.0
    grace_s: float = 20.0
    rebalance_lead_s: float | None = 2.0
    mtbf_s: float = 60.0
    run_for_s: float = 180.0
    seed: int = 0
    repetitions: int = 1
    during_rendezvous: bool = False
    store_outage: str = "crash"
    """etcd-outage: crash (killed, refused at once) or hang (stopped, never answers)."""
    crashes: int | None = None
    script: tuple[str, ...] = ()
    """A user's training script and its arguments (after ``--``); empty: the reference trainer."""
    observe: Observation = field(default_factory=Observation)
    """How the script is observed: progress/resume regexes, its checkpoint path, its unit."""
    workdir: str | None = None
    """The job's shared working directory (default: ``workdir/`` in the report folder)."""
    backend: str | None = None
    """Force the process-group backend (gloo, nccl); None: the script's (or trainer's) own."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables for every node (--env KEY=VALUE)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def job(self, **overrides: Any) -> JobSpec:
        """The job spec: the preset first, then explicit knobs and --pg-timeout over it."""
        args = list(self.trainer_args)
        if self.pg_timeout_s is not None:
            args += ["--pg-timeout", str(self.pg_timeout_s)]
        spec = JobSpec(nodes=self.nodes, nproc_per_node=self.nproc_per_node,
                       checkpoint_every=self.checkpoint_every, step_time=self.step_time,
                       max_restarts=self.max_restarts, trainer_args=tuple(args),
                       rdzv=RendezvousSpec(backend=RdzvBackend(self.rdzv_backend)))
        if self.preset is not None:
            spec = preset(self.preset).apply(spec)
        if self.rdzv_conf:
            spec = replace(spec, rdzv=replace(spec.rdzv, **dict(self.rdzv_conf)))
        spec = replace(spec, script=self.script, observe=self.observe, workdir=self.workdir,
                       backend=PgBackend(self.backend) if self.backend else None, env=self.env)
        return replace(spec, **overrides) if overrides else spec

    def local(self, **overrides: Any) -> LocalOptions:
        opts = LocalOptions(replace_lost_nodes=self.replace, provisioning_delay_s=self.provisioning_delay_s,
                            etcd_binary=self.etcd_binary, network=NetworkMode(self.network))
        return replace(opts, **overrides) if overrides else opts


def default_report_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{name}-{stamp}"


@contextmanager
def open_run(opts: ExperimentOptions, scenario: str, **local_overrides: Any) -> Iterator[ChaosRun]:
    """A ChaosRun on the local platform with live progress unless ``quiet``."""
    report_dir = opts.report_dir or default_report_dir(scenario)
    with ChaosRun(report_dir, scenario=scenario,
                  platform_options={"options": opts.local(**local_overrides)}) as run:
        if not opts.quiet:
            ConsoleProgress(run.timeline)
        try:
            yield run
        except JobFailed as exc:
            # the hypothesis did not hold, and the evidence says why: a verdict, not an error
            run.verdict = failed_verdict(run, exc)
        else:
            check_observation(run)


def failed_verdict(run: ChaosRun, exc: JobFailed) -> Verdict:
    """The verdict of a job that died for good; one that never trained says so, with
    the tail of every node's log (a script that crashes at start)."""
    reasons = "; ".join(exc.outcome.reasons)
    if any(e.source == "progress" and e.kind == "step" for e in run.timeline.events()):
        return Verdict(False, [f"FAILED: the job failed permanently: {reasons}"])
    tails = ["    " + tail.replace("\n", "\n    ") for tail in log_tails(run.platform.node_logs())]
    return Verdict(False, [f"FAILED: the job never reached steady state: it failed permanently before a "
                           f"training step was seen ({reasons}). The nodes' last log lines:", *tails])


def check_observation(run: ChaosRun) -> None:
    """Add the checks every script run shares (e.g. a checkpoint path never written)."""
    if run.verdict is None:
        return
    for ok, reason in observation_checks(run.observation()):
        run.verdict.require(ok, reason)


def check_recovered(v: Verdict, rec: Recovery, job: JobSpec, *, lost_at_most: int | None = None) -> None:
    """The checks every recoverable fault shares: training resumed, bounded loss."""
    bound = job.checkpoint_every if lost_at_most is None else lost_at_most
    v.require(rec.recovered, f"training resumed after the fault ({seconds(rec.recovery_s)})")
    unit = f" (in {job.observe.unit}s)" if job.script and job.observe.unit != "step" else ""
    v.require(rec.lost_steps is not None and rec.lost_steps <= bound,
              f"lost_steps {rec.lost_steps} <= {bound}{unit}")


def seconds(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f}s"
