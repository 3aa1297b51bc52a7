"""No verdict decided by the toolkit's own faults (issue 25, item 5).

Every error path of a watcher or of a cleanup records a toolkit check (names in
elastic_chaos.analysis.verdict.TOOLKIT_CHECKS): the run's outcome is then ``toolkit_error`` (exit 4),
never "the hypothesis did not hold". No job is started: the failures are made to happen in
the toolkit's own steps (a fault whose timed revert fails, a platform whose stop fails, a
watcher that will not stop), which is where they happen in real runs too.

Written against the code before the fix: a timed revert that failed was lost on its timer's
thread (its fault marked reverted, never tried again, nothing in the verdict), a platform stop
that failed with anything but a ChaosError left no report.json, and a run aborted by the
toolkit's own error (a fault it could not inject, a bug) was a failed hypothesis.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from elastic_chaos.analysis.verdict import TOOLKIT_CHECKS, Outcome
from elastic_chaos.errors import (
    ChaosError,
    FaultUnavailable,
    InjectionFailed,
    PlatformError,
    RecoveryTimeout,
    SetupError,
    SpecError,
    WatcherDied,
)
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.watchers.api import Watcher


@dataclass
class StuckFault(Fault):
    """A fault that hits nothing and whose revert fails (a node's cgroup gone under it)."""

    duration_s: float | None = 0.1
    reverts: int = 0
    name: ClassVar[str] = "stuck"

    def plan(self, platform: Platform) -> FaultPlan:
        return FaultPlan(self.name, "node-0", ("nothing",))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        return FaultRecord(self.name, "node-0", time.time(), None, {})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        self.reverts += 1
        raise OSError(f"revert #{self.reverts}: the node's cgroup is gone")


def verdict_of(run: ChaosRun) -> dict:
    return json.loads((run.report_dir / "report.json").read_text())["verdict"]


def failed_checks(verdict: dict) -> dict[str, str]:
    """Each failed check's name with its reasons (one line each)."""
    out: dict[str, str] = {}
    for c in verdict["checks"]:
        if c["ok"] is False:
            out[c["name"]] = "\n".join(filter(None, [out.get(c["name"]), c["reason"]]))
    return out


def test_a_timed_revert_that_fails_is_retried_at_teardown_and_is_the_toolkits_error(tmp_path):
    fault = StuckFault()
    with ChaosRun(tmp_path / "r") as run:
        run.inject(fault)
        time.sleep(0.5)                      # its timer fired and failed on its own thread
        assert fault.reverts == 1
    assert fault.reverts == 2                # not marked undone: the teardown tried again
    verdict = verdict_of(run)
    assert verdict["outcome"] == Outcome.TOOLKIT_ERROR.value
    failed = failed_checks(verdict)
    assert set(failed) == {"cleanup"} and "revert #1" in failed["cleanup"] and "revert #2" in failed["cleanup"]


def test_a_platform_stop_that_fails_with_any_error_is_a_cleanup_check_and_the_report_is_written(tmp_path):
    run = ChaosRun(tmp_path / "r")

    def broken_stop() -> None:
        raise OSError("kill: Operation not permitted")

    run.platform.stop = broken_stop  # type: ignore[method-assign]
    run.close()
    verdict = verdict_of(run)
    assert verdict["outcome"] == Outcome.TOOLKIT_ERROR.value
    assert "OSError: kill: Operation not permitted" in failed_checks(verdict)["cleanup"]


class Unstoppable(Watcher):
    """A watcher whose stop fails with a plain error (not a ChaosError)."""

    def poll(self) -> None:
        return

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)
        raise RuntimeError("could not close its stream")


def test_a_watcher_that_fails_to_stop_is_a_cleanup_check(tmp_path):
    with ChaosRun(tmp_path / "r") as run:
        run.add_watcher(Unstoppable(run.timeline))
    failed = failed_checks(verdict_of(run))
    assert set(failed) <= TOOLKIT_CHECKS and "RuntimeError: could not close its stream" in failed["cleanup"]


@pytest.mark.parametrize("error, outcome", [
    (InjectionFailed("403: pods/eviction is forbidden"), Outcome.TOOLKIT_ERROR),
    (PlatformError("the node pool lost track of node-1"), Outcome.TOOLKIT_ERROR),
    (KeyError("a bug"), Outcome.TOOLKIT_ERROR),
    (WatcherDied("RendezvousWatcher", RuntimeError("boom")), Outcome.TOOLKIT_ERROR),
    (SpecError("trace t.csv:2: not UTF-8"), "usage_error"),
    (RecoveryTimeout("recovery", 180.0), Outcome.FAILED),
])
def test_a_run_aborted_by_an_error_records_whose_error_it_was(tmp_path, error, outcome):
    with pytest.raises(type(error)), ChaosRun(tmp_path / "r"):
        raise error
    assert verdict_of_path(tmp_path / "r")["outcome"] == getattr(outcome, "value", outcome)


def verdict_of_path(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())["verdict"]


def test_only_what_the_job_did_is_a_verdict_on_the_hypothesis():
    from elastic_chaos.analysis.verdict import USAGE_CHECK
    from elastic_chaos.runner.endings import check_of
    assert check_of(WatcherDied("LogFollower", OSError("gone"))) in TOOLKIT_CHECKS
    for toolkit in (InjectionFailed("x"), PlatformError("x"), ChaosError("x"), KeyError("x"), OSError("x")):
        assert check_of(toolkit) in TOOLKIT_CHECKS, toolkit
    for usage in (SpecError("x"), SetupError("x"), FaultUnavailable("x")):
        assert check_of(usage) == USAGE_CHECK
    for job in (RecoveryTimeout("x", 1.0), AssertionError("x")):
        assert check_of(job) not in TOOLKIT_CHECKS | {USAGE_CHECK}
    assert check_of(KeyboardInterrupt("signal 15")) == "interrupted"   # a cancelled run: no verdict either way


def test_a_scenario_failed_by_the_toolkits_error_is_not_a_failed_hypothesis(pytester):
    pytester.makepyfile("""
        from elastic_chaos.errors import InjectionFailed, WatcherDied
        from elastic_chaos.pytest_plugin import _check_of

        def test_the_checks():
            assert _check_of(WatcherDied("LogFollower", OSError("gone"))) == "watcher"
            assert _check_of(InjectionFailed("403")) == "toolkit"
            assert _check_of(AssertionError("regain 90 s > 60 s")) == "test"
            assert _check_of(ValueError("the scenario's own bug")) == "test"
    """)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


def test_run_exits_with_the_outcome_its_report_json_holds():
    from elastic_chaos.cli.main import _exit_code_of
    assert _exit_code_of("run", InjectionFailed("403: pods/eviction is forbidden")) == Outcome.TOOLKIT_ERROR.exit_code
    assert _exit_code_of("run", WatcherDied("LogFollower", OSError("gone"))) == 4
    assert _exit_code_of("run", SpecError("trace t.csv:2: not UTF-8")) == 2
    assert _exit_code_of("run", FaultUnavailable("partition needs root")) == 2
    assert _exit_code_of("report", PlatformError("x")) == 2          # no run: a usage or setup error


def test_a_bug_of_the_toolkit_exits_4_with_its_traceback_never_as_a_verdict(monkeypatch, capsys):
    import signal

    from elastic_chaos.cli import faults_cmd
    from elastic_chaos.cli.main import main

    def broken(args: object) -> int:
        raise KeyError("a bug")

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(faults_cmd, "main", broken)
    try:
        assert main(["faults"]) == 4
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'a bug'" in err and "internal error" in err
