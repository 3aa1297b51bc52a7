"""Experiments where the job grows, or faults keep coming: scale-up and repeated."""
from __future__ import annotations

from chaos.analysis.recovery import analyze
from chaos.experiments.common import ExperimentOptions, open_run
from chaos.faults import KillNode, ScaleUp
from chaos.runner.run import ChaosRun, Verdict


def scale_up(opts: ExperimentOptions, *, scenario: str = "scale-up") -> ChaosRun:
    """Start below the maximum, add a node: the world grows, the restart budget is untouched."""
    base = opts.job()
    job = opts.job(start_nodes=base.max_nodes - 1) if base.max_nodes > base.min_nodes else base
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        fault = run.inject(ScaleUp())
        full = job.max_nodes * job.nproc_per_node
        rec = run.wait_for_world_size(fault, full, timeout=opts.timeout_s)
        v = Verdict()
        v.require(rec.world_size_final == full, f"the world grew {rec.world_size_before} -> {rec.world_size_final}")
        v.require(rec.restarts_used == 0, f"no restart budget spent (used {rec.restarts_used})")
        v.require(rec.lost_steps is not None and rec.lost_steps <= job.checkpoint_every,
                  f"lost_steps {rec.lost_steps} <= {job.checkpoint_every}")
        run.verdict = v
    return run


def repeated(opts: ExperimentOptions, *, scenario: str = "repeated") -> ChaosRun:
    """Node kills as a Poisson process (mean ``mtbf_s``) for ``run_for_s``, with
    replacement; every fault must be recovered from, and goodput is reported."""
    job = opts.job()
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        records = run.repeat(lambda: KillNode(), mtbf_s=opts.mtbf_s, duration_s=opts.run_for_s,
                             seed=opts.seed, min_alive=job.min_nodes)
        if records:
            run.wait_for_recovery(records[-1], timeout=opts.timeout_s)
        recs = analyze(run.timeline.events())
        goodput = run.goodput
        v = Verdict()
        v.require(all(r.recovered for r in recs), f"recovered from all {len(recs)} interruptions")
        v.require(all(r.lost_steps is not None and r.lost_steps <= job.checkpoint_every for r in recs),
                  f"each lost at most {job.checkpoint_every} steps ({[r.lost_steps for r in recs]})")
        v.require(goodput is not None, f"goodput {goodput:.2f}" if goodput is not None else "goodput unknown")
        run.verdict = v
    return run
