"""Experiments where something is lost: a node, a worker, the store host, the restart budget."""
from __future__ import annotations

import time
from dataclasses import replace

from chaos.errors import SpecError
from chaos.experiments.common import ExperimentOptions, check_recovered, open_run, seconds
from chaos.faults import KillDuringCheckpoint, KillNode, StoreHostLoss, WorkerCrash
from chaos.faults.triggers import checkpoint_started
from chaos.runner.run import ChaosRun, Verdict
from chaos.spec import RdzvBackend


def kill_node(opts: ExperimentOptions, *, scenario: str = "kill-node") -> ChaosRun:
    """Hard-kill one node of a steady job; the job must recover within one
    checkpoint interval of progress, and regrow to full size when replaced."""
    job = opts.job()
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        fault = run.inject(KillNode(node=opts.target))
        run.wait_for_recovery(fault, timeout=opts.timeout_s)
        full = job.max_nodes * job.nproc_per_node
        if opts.replace:
            run.wait_for_world_size(fault, full, timeout=opts.timeout_s)
        rec = run.recovery(fault)
        v = Verdict()
        check_recovered(v, rec, job)
        v.require((rec.world_size_after or 0) >= job.min_nodes * job.nproc_per_node,
                  f"world size after recovery {rec.world_size_after} >= min {job.min_nodes * job.nproc_per_node}")
        if opts.replace:
            v.require(rec.world_size_final == full and rec.replacement_s is not None,
                      f"replacement joined: world size back to {full} (replacement_s {seconds(rec.replacement_s)})")
        run.verdict = v
    return run


def worker_crash(opts: ExperimentOptions, *, scenario: str = "worker-crash") -> ChaosRun:
    """One worker dies; its node restarts the worker group, the world keeps its size."""
    job = opts.job()
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        fault = run.inject(WorkerCrash(node=opts.target))
        rec = run.wait_for_recovery(fault, timeout=opts.timeout_s)
        v = Verdict()
        check_recovered(v, rec, job)
        v.require(rec.world_size_after == rec.world_size_before,
                  f"world size kept: {rec.world_size_before} -> {rec.world_size_after}")
        v.require(rec.restarts_used == 1, f"one restart spent of the budget (used {rec.restarts_used}"
                                          f" of {job.max_restarts})")
        run.verdict = v
    return run


def kill_during_checkpoint(opts: ExperimentOptions, *, scenario: str = "kill-during-checkpoint") -> ChaosRun:
    """Kill the node writing a checkpoint while it writes, ``repetitions`` times;
    every restart must load the newest COMPLETE checkpoint, never the partial one."""
    if opts.script and opts.observe.progress_regex:
        raise SpecError("kill-during-checkpoint fires when a checkpoint write starts, which only "
                        "trainer.progress reports (report_checkpoint_started); a script read by "
                        "--progress-regex shows completed saves only. Integrate it (docs/INTEGRATE.md)")
    job = opts.job(trainer_args=(*opts.job().trainer_args, "--save-delay", "1.0"))
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        v = Verdict()
        for i in range(opts.repetitions):
            armed = run.arm(KillDuringCheckpoint(), checkpoint_started(min_step=opts.steady_steps))
            fault = armed.wait(timeout=opts.timeout_s)
            rec = run.wait_for_recovery(fault, timeout=opts.timeout_s)
            interrupted = fault.detail.get("checkpoint_step")
            v.require(fault.detail.get("during_write") is True,
                      f"#{i + 1}: the kill landed while checkpoint {interrupted} was being written")
            v.require(rec.resumed_from_step is not None and interrupted is not None
                      and rec.resumed_from_step < int(interrupted),
                      f"#{i + 1}: resumed from step {rec.resumed_from_step}, the newest complete "
                      f"checkpoint, not the interrupted {interrupted}")
            check_recovered(v, rec, job)
            if opts.replace and i + 1 < opts.repetitions:
                run.wait_for_world_size(fault, job.max_nodes * job.nproc_per_node, timeout=opts.timeout_s)
        corrupt = [e for e in run.timeline.events() if e.source == "checkpoint" and e.kind == "corrupt"]
        v.require(not corrupt, f"no restart met a corrupt checkpoint ({len(corrupt)} reported)")
        run.verdict = v
    return run


def store_host_loss(opts: ExperimentOptions, *, scenario: str = "store-host-loss") -> ChaosRun:
    """Kill the node hosting the c10d store. Hypothesis: the job survives it. On
    c10d it does not (the store is a single point of failure): the verdict
    says the job failed permanently and why."""
    base = opts.job()
    job = replace(base, rdzv=replace(base.rdzv, backend=RdzvBackend.C10D))
    with open_run(opts, scenario, replace_lost_nodes=False) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        fault = run.inject(StoreHostLoss())
        v = Verdict()
        deadline = time.monotonic() + opts.timeout_s
        while time.monotonic() < deadline and not run.job_gone():
            if run.recovery(fault).regain_s is not None:
                break
            time.sleep(1.0)
        rec = run.recovery(fault)
        if run.job_gone():
            outcome = run.wait_for_job_end(timeout=10)
            v.require(False, "the job survives the loss of its c10d store host: it did not, it failed "
                      "permanently: " + "; ".join(outcome.reasons))
        else:
            v.require(rec.regain_s is not None,
                      f"the job survives the loss of its store host ({seconds(rec.regain_s)})")
        run.verdict = v
    return run


def restarts_exhausted(opts: ExperimentOptions, *, scenario: str = "restarts-exhausted") -> ChaosRun:
    """Crash a worker more often than ``max_restarts`` allows. Hypothesis: the job
    survives ``crashes`` worker crashes. With crashes > max_restarts it cannot:
    the verdict says the job failed permanently because the budget ran out."""
    job = opts.job()
    crashes = opts.crashes if opts.crashes is not None else job.max_restarts + 1
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        v = Verdict()
        target = opts.target or run.platform.alive_nodes()[-1].name
        for i in range(crashes):
            fault = run.inject(WorkerCrash(node=target))
            if i + 1 < crashes:
                run.wait_for_recovery(fault, timeout=opts.timeout_s)
        deadline = time.monotonic() + opts.timeout_s
        while time.monotonic() < deadline and not run.job_gone():
            if run.recovery(fault).regain_s is not None:
                break
            time.sleep(1.0)
        if run.job_gone():
            outcome = run.wait_for_job_end(timeout=10)
            v.require(False, f"the job survives {crashes} worker crashes with max_restarts={job.max_restarts}: "
                      "it did not, it failed permanently: " + "; ".join(outcome.reasons))
        else:
            v.require(run.recovery(fault).recovered,
                      f"the job survives {crashes} worker crashes with max_restarts={job.max_restarts}")
        run.verdict = v
    return run
