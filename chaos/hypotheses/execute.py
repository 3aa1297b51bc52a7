"""Running one hypothesis: the single path ``elastic-chaos run``, ``demo`` and the
``run_hypothesis`` fixture take (settings from declared options, the run, the
hypothesis' steps, the checks every run shares)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from chaos.analysis import barrier
from chaos.analysis.observation import checks as observation_checks
from chaos.analysis.observation import log_tails
from chaos.analysis.verdict import STEADY_CHECK, Check
from chaos.errors import FaultUnavailable, RecoveryTimeout, WatcherDied
from chaos.events import ProgressEv
from chaos.hypotheses.api import Trial, settings
from chaos.hypotheses.catalog import get
from chaos.hypotheses.dryrun import build_fault
from chaos.platforms import platform_options
from chaos.runner.run import ChaosRun, JobFailed, NotSteady


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
    build_fault(s)   # the fault's own checks (a straggler's period), before a report folder is opened
    run = ChaosRun(report_dir, platform=platform, scenario=scenario or name,
                   platform_options=platform_options(platform, s.platform), overwrite=overwrite)
    with run:
        if on_start is not None:
            on_start(run)
        trial = Trial(h, run, s)
        if h.fault is not None:  # before the job starts: skip (pytest) or refuse (CLI) at once
            reason = trial.fault().unavailable(run.platform)
            if reason is not None:
                raise FaultUnavailable(f"{name}: {reason}")
        try:
            h.steps(trial)
        except NotSteady as exc:     # checked before the fault: no fault was injected
            trial.verdict.checks.append(_not_steady(run, exc))
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
            _shared_checks(trial)
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


def _shared_checks(t: Trial) -> None:
    """Checks every run shares: what a user's script let us see, exactly-once samples."""
    for ok, reason in observation_checks(t.run.observation()):
        t.verdict.require(ok, reason, check="observation")
    samples = t.run.samples
    if samples.accounted:
        t.verdict.require(samples.exactly_once, f"every sample trained exactly once in the committed "
                                                f"history ({samples.summary()})", check="exactly-once")
