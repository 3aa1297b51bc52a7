"""How a run's waits end when the job does not do what they wait for, and the check each ending fails.

A wait (elastic_chaos.runner.run.ChaosRun.wait_for) ends early with :class:`JobFailed` (every node gone
for good), :class:`JobFinished` (the training ended on its own) or, before a fault,
:class:`NotSteady`; :func:`check_of` names the verdict check any exception that ends a run fails,
which decides its outcome and exit code.
"""
from __future__ import annotations

import re
import signal
from pathlib import Path

from elastic_chaos.analysis.outcome import JobOutcome
from elastic_chaos.analysis.steady import Unsteady
from elastic_chaos.analysis.verdict import DISK_CHECK, INTERRUPTED_CHECK, JOB_FINISHED_CHECK, USAGE_CHECK
from elastic_chaos.errors import (
    ChaosError,
    DiskFull,
    FaultUnavailable,
    RecoveryTimeout,
    SetupError,
    SpecError,
    WatcherDied,
)
from elastic_chaos.events import Event


class JobFailed(ChaosError):
    """Every node of the job is gone and none is coming back; ``outcome`` says why."""

    def __init__(self, message: str, outcome: JobOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


class JobFinished(ChaosError):
    """The job's training ended on its own (its workers exited 0) while the run waited for ``what``:
    before its fault, or before the fault could be judged. ``finished`` is the event that says so
    (elastic_chaos.analysis.outcome.training_finished). Not a failure of the job, and no experiment."""

    def __init__(self, what: str, finished: Event) -> None:
        super().__init__(f"while waiting for {what}: the job finished its training on its own "
                         f"({finished.node or 'a worker'}: {finished.type})")
        self.what = what
        self.finished = finished


class NotSteady(ChaosError):
    """The job was not steady when a hypothesis was about to inject its fault (elastic_chaos.analysis.steady);
    ``problems`` says how. No fault is injected: no experiment was made."""

    def __init__(self, problems: list[Unsteady]) -> None:
        super().__init__("the job is not steady: " + "; ".join(p.what for p in problems))
        self.problems = problems


def check_of(exc: BaseException) -> str:
    """The verdict check a run that ``exc`` ended fails, and so its outcome and exit code:
    ``usage`` (a bad input or setup met once the run had begun: no run), ``watcher`` (a watcher
    died: the run went blind), ``toolkit`` (the toolkit or its platform failed: a fault it could not
    inject, a bug), or ``run`` (what the job did: it did not recover in time or died for good; a
    scenario's assertion; an interrupt). Never a hypothesis check for the toolkit's own failure."""
    if isinstance(exc, (SpecError, SetupError, FaultUnavailable)):
        return USAGE_CHECK
    if isinstance(exc, WatcherDied):
        return "watcher"
    if isinstance(exc, JobFinished):
        return JOB_FINISHED_CHECK
    if isinstance(exc, DiskFull):
        return DISK_CHECK
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED_CHECK
    if isinstance(exc, (RecoveryTimeout, JobFailed, AssertionError)) or not isinstance(exc, Exception):
        return "run"
    return "toolkit"


def interruption(exc: BaseException) -> str:
    """What stopped the run, in words (elastic_chaos.signals turns SIGTERM into a KeyboardInterrupt that says so)."""
    said = str(exc)
    number = re.fullmatch(r"signal (\d+)", said)
    if number is not None:
        try:
            return signal.Signals(int(number[1])).name
        except ValueError:
            return said
    return said or "Ctrl-C"


def said(exc: BaseException) -> str:
    """An error for a check's reason: a ChaosError's message says it all; anything else is named."""
    return str(exc) if isinstance(exc, ChaosError) else f"{type(exc).__name__}: {exc}"


def tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
