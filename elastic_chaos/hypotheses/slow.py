"""Hypotheses where nothing dies: a straggler slows the job, a hung rank stalls it.

- ``straggler``: one node runs N times slower for a while. A synchronous job
  steps at its slowest rank's pace, so its step rate drops to 1/N (the truth
  the fault is checked against), the job says which rank it waited for, and
  the rate comes back when the node does. The hypothesis bounds the throughput
  lost.
- ``hung-rank``: one worker stops inside training, alive. Its peers find out
  only by their collective timeout (the job's ``pg_timeout_s``, the timeouts
  command's first line), at that timeout and not before, and the job recovers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from elastic_chaos.analysis.hang import hang_detection
from elastic_chaos.analysis.throughput import WINDOW_S, Throughput, throughput
from elastic_chaos.errors import SpecError
from elastic_chaos.events import ProgressEv
from elastic_chaos.faults.slow import Straggler
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.hypotheses.silent import SILENT_PG_TIMEOUT_S
from elastic_chaos.options import DAY_S, option, validate

AGENT_SHUTDOWN_S = 30.0
"""torchrun's wait between SIGTERM and SIGKILL when it stops a worker group (torch's
``_shutdown(timeout=30)``): a stopped worker does not act on SIGTERM."""


@dataclass(frozen=True)
class ThroughputBound:
    max_drop: float | None = option(None, "the most of its step rate the job may lose while the node is slow, a "
                                          "fraction (default: a synchronous job's 1 - 1/factor, plus --tolerance "
                                          "of it)", minimum=0, maximum=1)
    tolerance: float = option(0.2, "how far, relative, the measured drop may be from a synchronous job's "
                                   "1 - 1/factor (and the rate after from the rate before)", minimum=0, maximum=1)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("straggler", "slow node: one node runs N times slower for a while; a synchronous job's step rate "
                         "drops to 1/N, the job names the rank it waited for, the rate comes back",
            fault="straggler", params=ThroughputBound)
def straggler(t: Trial) -> None:
    """Slow one node by ``--factor`` for ``--duration`` seconds after a steady window.
    A synchronous job loses 1 - 1/factor of its step rate (within ``--tolerance``),
    never more than ``--max-drop``, sees the slowed node's rank as the one it waited
    for, rides the slowdown out without a restart, and steps at its old rate after."""
    fault = t.fault()
    assert isinstance(fault, Straggler)
    if fault.duration_s is None:
        raise SpecError("straggler needs --duration: the step rate after the slowdown is part of the hypothesis")
    t.start()
    t.steady()
    began = t.run.wait_for_steps(1, timeout=t.opts.timeout_s).t
    t.run.wait_for(f"{WINDOW_S:g}s of steady training", lambda e: e.type == ProgressEv.STEP
                   and e.t >= began + WINDOW_S, timeout=t.opts.timeout_s)
    record = t.inject(fault)
    t.run.phase("slowed", for_s=fault.duration_s)
    end = record.injected_at + fault.duration_s + WINDOW_S
    t.run.wait_for("training after the slowdown", lambda e: e.type == ProgressEv.STEP and e.t >= end,
                   timeout=fault.duration_s + WINDOW_S + t.opts.timeout_s)
    rates = throughput(t.run.timeline.events(), target=record.target, injected_at=record.injected_at,
                       factor=fault.factor)
    _check_throughput(t, rates, fault)
    rec = t.run.recovery(record)
    errors = t.run.timeline.select(ProgressEv.WORKER_ERROR, after=record.injected_at)
    t.verdict.require(rec.restarts_used == 0 and not errors,
                      f"the job rode the slowdown out: no worker failed ({len(errors)} errors), no restart "
                      f"({rec.restarts_used})", check="no-restart")


def _check_throughput(t: Trial, r: Throughput, fault: Straggler) -> None:
    v, tol = t.verdict, t.params.tolerance
    expected = 1.0 - 1.0 / fault.factor
    bound = t.params.max_drop if t.params.max_drop is not None else min(1.0, expected * (1 + tol))
    v.require(r.drop is not None and r.drop <= bound, f"{r.describe()}; lost at most {bound:.0%}",
              check="bounded-loss")
    v.require(r.drop is not None and abs(r.drop - expected) <= tol * expected,
              f"a node {fault.factor:g}x slower cost the job {_pct(r.drop)} of its step rate, within {tol:.0%} "
              f"of a synchronous job's {expected:.0%}", check="synchronous")
    v.require(r.rate_after is not None and r.rate_before is not None and r.rate_after >= (1 - tol) * r.rate_before,
              f"the step rate came back: {_rate(r.rate_after)} after vs {_rate(r.rate_before)} before",
              check="recovered")
    if r.slow_rank is None:
        v.skip("which rank the job waited for: " + "; ".join(m for m in r.missing if "sync_s" in m),
               check="attributed")
        return
    v.require(r.slow_node == r.target, f"the job waited for rank {r.slow_rank} on {r.slow_node} (its own time per "
                                       f"step {seconds(r.slow_own_before_s)} -> {seconds(r.slow_own_during_s)}), "
                                       f"the slowed node {r.target}", check="attributed")


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0%}"


def _rate(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}/s"


@dataclass(frozen=True)
class DetectionBound:
    slack_s: float = option(3.0, "how far from the collective timeout the detection may come", minimum=0,
                            units="s", flag="--slack", maximum=DAY_S)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("hung-rank", "hung worker: one worker stops inside training, alive; its peers find out by their "
                         "collective timeout (--pg-timeout), at that timeout, and the job recovers",
            fault="hung-rank", params=DetectionBound, defaults={"pg_timeout_s": SILENT_PG_TIMEOUT_S})
def hung_rank(t: Trial) -> None:
    """Stop one worker where it is (SIGSTOP; process, node and agent alive). Nothing tells
    the job but its collectives: the peers' collective fails with a timeout, detection
    comes within ``--slack`` of the job's collective timeout (``--pg-timeout``), the hung
    worker is not reported failed before that, and training resumes."""
    t.start()
    t.steady()
    record = t.inject()
    timeout = record.detail.get("pg_timeout_s")
    timeout = float(timeout) if isinstance(timeout, (int, float)) else None
    rec = t.recover(record, extra_s=(timeout or 0.0) + AGENT_SHUTDOWN_S)
    pid = record.detail.get("pid")
    found = hang_detection(t.run.timeline.events(), target=record.target, injected_at=record.injected_at,
                           pg_timeout_s=timeout, hung_pid=pid if isinstance(pid, int) else None)
    v = t.verdict
    v.require(found.causes == ["timeout"], f"the peers' collectives failed by a timeout, never a closed connection "
                                           f"({', '.join(found.causes) or 'none failed'})", check="silent")
    v.require(not found.reported_early, f"the hung worker (pid {pid}) was alive until its peers gave up: not "
                                        "reported failed before their collective timed out", check="alive")
    first = found.first_error or {}
    how = (f"rank {first.get('rank')} on {first.get('node')}: {first.get('message', '')[:90]}"
           if first else "no collective timed out")
    if timeout is None:
        v.skip(f"detection {seconds(rec.detect_s)} after the hang ({how}); the script's collective timeout is not "
               "known: pass --pg-timeout to bound it", check="detected-by-timeout")
    else:
        near = rec.detect_s is not None and found.timed_out_s is not None \
            and math.isclose(rec.detect_s, timeout, abs_tol=t.params.slack_s)
        v.require(near, f"detected {seconds(rec.detect_s)} after the hang, within {t.params.slack_s:g}s of the "
                        f"{timeout:g}s collective timeout: the first collective timed out after "
                        f"{seconds(found.timed_out_s)} ({how})", check="detected-by-timeout")
    t.check_recovered(rec)
