"""Running one hypothesis: the single path ``elastic-chaos run``, ``demo`` and the
``run_hypothesis`` fixture take (settings from declared options, the run, the
hypothesis' steps, the checks every run shares)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from elastic_chaos.analysis import barrier
from elastic_chaos.analysis.observation import checks as observation_checks
from elastic_chaos.analysis.result import RunResult
from elastic_chaos.analysis.verdict import JOB_FINISHED_CHECK, STEADY_CHECK, Check
from elastic_chaos.errors import FaultUnavailable, RecoveryTimeout, WatcherDied
from elastic_chaos.events import ProgressEv, RunnerEv
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.hypotheses.api import Trial, settings
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.runner.endings import JobFailed, JobFinished, NotSteady
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.watchers.tails import log_tails


def execute(name: str, values: Mapping[str, Any], *, report_dir: Path, platform: str = "local",
            scenario: str | None = None, on_start: Callable[[ChaosRun], None] | None = None,
            overwrite: bool = False) -> ChaosRun:
    """Run hypothesis ``name`` with ``values`` on ``platform``; returns the closed run
    (its ``verdict``, timeline and report.json written). Blocks for the whole run.

    A job that died for good or did not recover within the timeout, or a watcher
    that died (the run went blind), is a failed verdict (with the evidence); a bad
    option, or a report folder that already holds a run (unless ``overwrite``) or
    cannot be written, is a SpecError before anything starts; a fault the platform
    cannot make raises FaultUnavailable."""
    h = get(name)
    s = settings(h, values, platform)
    run = ChaosRun(report_dir, platform=platform, scenario=scenario or name,
                   options=s.options, overwrite=overwrite)
    with run:
        if on_start is not None:
            on_start(run)
        if s.cost.given:   # what the report turns each interruption's seconds into (analysis/cost.py)
            run.timeline.emit(RunnerEv.COST_BASIS, data=s.cost.recorded())
        trial = Trial(h, run, s)
        run.verdict = trial.verdict   # the checks made so far stay when the run is interrupted
        if h.fault is not None:  # before the job starts: skip (pytest) or refuse (CLI) at once
            reason = s.built.unavailable(run.platform) if s.built is not None else None
            if reason is not None:
                raise FaultUnavailable(f"{name}: {reason}")
        try:
            h.steps(trial)
        except NotSteady as exc:     # checked before the fault: no fault was injected
            trial.verdict.checks.append(_not_steady(run, exc))
        except JobFinished as exc:
            trial.verdict.checks.append(_job_finished(run, exc))
        except JobFailed as exc:
            trial.verdict.checks.append(_job_failed(run, exc))
        except RecoveryTimeout as exc:
            if run.faults:
                trial.verdict.fail(_timed_out(run, exc), check="in-time")
            else:   # still waiting for steady training when time ran out: no experiment was made
                trial.verdict.fail(f"the job did not reach steady state: {exc}", check=STEADY_CHECK)
        except WatcherDied as exc:   # blind from then on: no other check can be made
            trial.verdict.fail(str(exc), check="watcher")
        else:
            run.closing_checks = shared_checks
        run.verdict = trial.verdict
    return run


def _timed_out(run: ChaosRun, exc: RecoveryTimeout) -> str:
    """The reason of a run that did not recover in time, with why where the timeline shows it
    (survivors stuck in the rank exchange of a round a participant of which was lost)."""
    why = [s.describe() for s in barrier.stalls(run.timeline.events())]
    return "; ".join([str(exc), *why])


def _job_failed(run: ChaosRun, exc: JobFailed) -> Check:
    """The check of a job that died for good; one that died before any fault was never steady
    (with the tail of every node's log: a script that crashes at start)."""
    reasons = "; ".join(exc.outcome.reasons)
    if run.faults:
        return Check("job-survives", False, f"the job failed permanently: {reasons}")
    when = "after it trained, before the fault" if run.timeline.select(ProgressEv.STEP) else \
        "before a training step was seen"
    return Check(STEADY_CHECK, False, f"the job never reached steady state: it failed permanently {when} "
                                      f"({reasons}), so no fault was injected. {_tails(run)}")


def _job_finished(run: ChaosRun, exc: JobFinished) -> Check:
    """The check of a job whose training ended on its own before its fault could be judged: what it
    trained, when it finished, and what the run was still waiting for (no experiment was made)."""
    job = run.job
    unit = job.observe.unit if job is not None else "step"
    steps = run.timeline.select(ProgressEv.STEP)
    fault = run.faults[0] if run.faults else None
    origin = fault.injected_at if fault is not None else run.started_at
    said = f"{exc.finished.node or 'a worker'} reported its workers finished at {_at(exc.finished.t, fault, origin)}"
    if not steps:
        regex = job.observe.progress_regex if job is not None else None
        why = (f"no line matched --progress-regex {regex!r}, so no {unit} was seen" if regex else
               f"no training {unit} was reported")
        return Check(JOB_FINISHED_CHECK, False, f"the job finished on its own ({said}) before a training {unit} was "
                                                f"seen: {why}; no fault was injected, nothing was tested. "
                                                f"{_tails(run)}")
    last = steps[-1]
    trained = f"its last {unit} seen was {last.data.step}, at {_at(last.t, fault, origin)}"
    if fault is None:
        return Check(JOB_FINISHED_CHECK, False, f"the job finished its training on its own ({said}; {trained}) "
                                                f"while the run waited for {exc.what}: no fault was injected, nothing "
                                                f"was tested; give the job more {unit}s, or inject sooner "
                                                "(--steady-steps)")
    return Check(JOB_FINISHED_CHECK, False, f"the job finished its training on its own ({said}; {trained}) while "
                                            f"the run waited for {exc.what}: the {fault.fault} could not be judged; "
                                            f"give the job more {unit}s after the fault")


def _at(t: float, fault: FaultRecord | None, origin: float) -> str:
    """A time said from the fault (+/-s), else from the run's start."""
    return f"{t - origin:+.1f} s from the fault" if fault is not None else f"{t - origin:.1f} s into the run"


def _not_steady(run: ChaosRun, exc: NotSteady) -> Check:
    """The check of a job that was not steady before the fault: what, and the nodes' own lines."""
    what = "; ".join(p.what for p in exc.problems)
    failed = sorted({str(e.node) for p in exc.problems for e in p.evidence if e.node})
    return Check(STEADY_CHECK, False, f"the job was not steady before the fault, so no fault was injected and "
                                      f"nothing was tested: {what}. {_tails(run, only=failed or None)}")


def _tails(run: ChaosRun, only: list[str] | None = None) -> str:
    logs = {n: p for n, p in run.platform.node_logs().items() if only is None or n in only}
    tails = "\n".join("    " + tail.replace("\n", "\n    ") for tail in log_tails(logs))
    return f"The nodes' last log lines:\n{tails}"


def shared_checks(result: RunResult) -> list[Check]:
    """Checks every run shares, made from its final result as it closes (ChaosRun.closing_checks): what a
    user's script let us see, exactly-once samples."""
    out = [Check("observation", ok, reason) for ok, reason in observation_checks(result.observation)]
    samples = result.samples
    if samples is not None and samples.accounted:
        out.append(Check("exactly-once", samples.exactly_once, "every sample trained exactly once in the committed "
                                                               f"history ({samples.summary})"))
    return out
