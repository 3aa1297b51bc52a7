"""Hypotheses where the job grows, or faults keep coming: scale-up and repeated losses."""
from __future__ import annotations

from dataclasses import dataclass, replace

from elastic_chaos.analysis.recovery_analysis import analyze
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.options import DAY_S, MAX_SEED, WEEK_S, option, validate


@hypothesis("scale-up", "a node joins mid-run; the job re-forms a larger world", fault="scale-up")
def scale_up(t: Trial) -> None:
    """Start below the maximum, add a node: the world grows to full size, the restart
    budget is untouched, and at most one checkpoint interval is replayed."""
    job = t.job
    if job.start_nodes is None and job.max_nodes > job.min_nodes:
        job = replace(job, start_nodes=job.max_nodes - 1)
    t.start(job)
    t.steady()
    record = t.inject()
    rec = t.regrow(record)
    t.verdict.require(rec.world_size_final == t.full_world and (rec.world_size_before or 0) < t.full_world,
                      f"the world grew {rec.world_size_before} -> {rec.world_size_final}", check="grew")
    t.verdict.require(rec.restarts_used == 0, f"no restart budget spent (used {rec.restarts_used}): a "
                                              "membership change is not a failure", check="restarts")
    t.check_lost(rec)


@dataclass(frozen=True)
class Arrivals:
    mtbf_s: float = option(60.0, "mean seconds between failures (exponential gaps)", flag="--mtbf", above=0,
                           units="s", maximum=DAY_S)
    run_for_s: float = option(180.0, "seconds of faults", flag="--run-for", above=0, units="s", maximum=WEEK_S)
    seed: int = option(0, "random seed of the arrivals", minimum=0, maximum=MAX_SEED)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("repeated", "node kills as a Poisson process at a mean time between failures, with replacement; "
                        "reports goodput and every recovery", fault="kill-node", params=Arrivals)
def repeated(t: Trial) -> None:
    """Node kills as a Poisson process (mean ``--mtbf``) for ``--run-for`` seconds. Each
    interruption is recovered from (or overtaken by the next one, which then counts),
    each loses at most one checkpoint interval, and goodput is reported."""
    p = t.params
    t.start()
    t.steady()
    records = t.run.repeat(lambda: t.fault(), mtbf_s=p.mtbf_s, duration_s=p.run_for_s, seed=p.seed,
                           min_alive=t.job.min_nodes)
    if records:
        t.recover(records[-1])
    recs = analyze(t.run.timeline.events())
    unrecovered = [r for r in recs[:-1] if not r.recovered]
    t.verdict.require(len(recs) == len(records), f"{len(records)} interruption(s), each measured", check="measured")
    t.verdict.require(not recs or recs[-1].recovered, "the last interruption was recovered from", check="recovered")
    t.verdict.require(all(r.overtaken for r in unrecovered),
                      f"every other one recovered or was overtaken by the next ({len(unrecovered)} overtaken)",
                      check="recovered-or-overtaken")
    lost = [r.lost_steps for r in recs]
    t.verdict.require(all(x is None or x <= t.job.checkpoint_every for x in lost),
                      f"each lost at most {t.job.checkpoint_every} steps ({lost})", check="bounded-loss")
    goodput = t.run.goodput
    t.verdict.require(goodput is not None and 0.0 < goodput < 1.0,
                      f"goodput {goodput:.2f}" if goodput is not None else "goodput unknown", check="goodput")
