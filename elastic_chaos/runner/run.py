"""Run a chaos experiment: steady state -> fault -> observe -> verdict.

A ChaosRun owns one report folder, one timeline, one platform running one
job, and the watchers feeding the timeline. Scenario code (pytest, CLI)
drives it with a few blocking calls that read like the hypothesis::

    with ChaosRun(report_dir) as run:
        run.start(JobSpec(nodes="1:2"))
        run.wait_for_step(40)
        fault = run.inject(KillNode())
        recovery = run.wait_for_recovery(fault)
        assert recovery.lost_steps <= 20

Leaving the block reverts what faults broke, stops everything (also on
failure), builds the run's report once in memory (``report``: its typed result,
elastic_chaos.analysis.result.RunResult, with the evidence) and writes report.json and
the renderings from it. A report folder holds one run: a used one is refused
before anything starts (elastic_chaos.runner.folder), unless ``overwrite``.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from elastic_chaos import signals
from elastic_chaos.analysis import outcome as analysis
from elastic_chaos.analysis.final_state import FinalState
from elastic_chaos.analysis.goodput import goodput
from elastic_chaos.analysis.invariants import SplitBrain, split_brains
from elastic_chaos.analysis.observation import ScriptObservation
from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.recovery_analysis import window_end
from elastic_chaos.analysis.result import RunResult, build_result
from elastic_chaos.analysis.samples import SampleAccount, account_samples
from elastic_chaos.analysis.tracking import RecoveryTracker
from elastic_chaos.analysis.verdict import (
    DISK_CHECK,
    INTERRUPTED_CHECK,
    USAGE_CHECK,
    Check,
    Verdict,
)
from elastic_chaos.errors import (
    ChaosError,
    DiskFull,
    RecoveryTimeout,
    WatcherDied,
)
from elastic_chaos.events import AgentEv, Event, ProgressEv, RunnerEv, Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.events.runner_events import Phase
from elastic_chaos.faults.api import Fault
from elastic_chaos.faults.triggers import Trigger
from elastic_chaos.platforms import create_platform
from elastic_chaos.platforms.api import Platform
from elastic_chaos.reporting.render import RenderResult
from elastic_chaos.reporting.report import write_report
from elastic_chaos.reporting.run_report import RunReport, missing_in
from elastic_chaos.runner import disk, folder
from elastic_chaos.runner.endings import JobFailed, JobFinished, NotSteady, check_of, interruption, said, tail
from elastic_chaos.runner.ledger import ArmedFault, FaultLedger
from elastic_chaos.runner.steady import LINE_SLACK_S, READ_PAST_S, steady_problems
from elastic_chaos.runner.wiring import job_watchers
from elastic_chaos.spec import JobSpec
from elastic_chaos.waiting import eventually
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.checkpoints import CheckpointWatcher, NodeRoots
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.script_lines import ScriptLines

log = logging.getLogger(__name__)


SETTLE_STEPS = 5
SETTLE_S = 5.0
SETTLE_MIN_S = 2.0
"""After a recovery: steps trained (at least SETTLE_MIN_S, at most SETTLE_S waited) before teardown,
for the step chart."""


class ChaosRun:
    def __init__(self, report_dir: Path, *, platform: str = "local", scenario: str = "adhoc",
                 options: Any = None, clients: Mapping[str, Any] | None = None, overwrite: bool = False) -> None:
        """Open the run's report folder: SpecError when it already holds a run (``overwrite``
        deletes that run first), is a file or cannot be written. Starts nothing. ``options``: the
        platform's options object (elastic_chaos.platforms.platform_options; None: its defaults);
        ``clients``: API clients a test injects into the platform."""
        # the folder is this run's until its report is written (elastic_chaos.runner.folder: a live run's lock)
        self._claim = folder.claim(report_dir, overwrite=overwrite)
        # nodes run with another cwd: paths must be absolute
        self.report_dir = self._claim.path.resolve()
        self.scenario = scenario
        try:
            disk.reserve(self.report_dir)   # room for the report, whatever fills the disk
            self.timeline = Timeline(self.report_dir / "timeline.jsonl")
            self.platform: Platform = create_platform(platform, self.timeline, self.report_dir, options,
                                                      **(clients or {}))
        except BaseException:
            self._claim.release()
            raise
        self.job: JobSpec | None = None
        self.ledger = FaultLedger(self.platform, self.timeline, check_alive=self._check_alive,
                                  last_progress=self.last_progress)
        self.verdict: Verdict | None = None
        self.started_at = time.time()
        self._watchers: list[Watcher] = []
        self._closed = False
        self.workdir: Path | None = None
        """The job's shared working directory on this machine (None where not local)."""
        self.node_roots: NodeRoots | None = None
        """Where a script's checkpoint path was watched on each node's own disk (node_local_workdir)."""
        self.ckpt_watcher: CheckpointWatcher | None = None
        """The watcher of a script's own checkpoint file (--checkpoint), when there is one."""
        self._follower: LogFollower | None = None
        self._phase: str | None = None
        self.script_lines: ScriptLines | None = None
        """What reads a user script's own lines (None before start): says whether it printed any."""
        self.closing_checks: Callable[[RunResult], list[Check]] | None = None
        """Checks made from the run's final result as it closes (the checks every run shares:
        elastic_chaos.hypotheses.execute), added to ``verdict`` before the report is written."""
        self.judged: dict[float, Recovery] = {}
        """Each fault's Recovery as a hypothesis last read it (by injected_at): the report shows these
        (measured once), so a check's figures and the report's cannot differ."""
        self.final_state: FinalState | None = None
        """The final-state comparison a hypothesis made (``--compare-final``): report.json's ``final_state``."""
        self.report: RunReport | None = None
        """The run's report, made once when it closes (its result, events and node logs)."""
        self.rendered: RenderResult | None = None
        """What was rendered from it (report.html, ...); None before close or when rendering failed."""
        self.unwritten: str | None = None
        """Why the report could not be written (a disk full past the reserve), and where the evidence is."""
        self._disk: disk.DiskWatch | None = None
        # the zone the nodes write their agents' log times in, now: a report rendered later, elsewhere, reads
        # the lines in it (not in the zone of the machine that renders)
        zone = self.platform.node_log_timezone() or datetime.datetime.now().astimezone().tzinfo
        offset = zone.utcoffset(datetime.datetime.now()) if zone is not None else None
        self._log_utc_offset_s = offset.total_seconds() if offset is not None else None

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> ChaosRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None:
            check = check_of(exc)
            why = (f"not a run: {exc}" if check == USAGE_CHECK else
                   f"interrupted ({interruption(exc)}) during the {self._phase or 'start'} phase: the run was "
                   "stopped, so it says nothing about the hypothesis" if check == INTERRUPTED_CHECK else
                   f"run aborted: {type(exc).__name__}: {exc}")
            if self.verdict is None:
                self.verdict = Verdict.failed(why, check=check)
            elif check == INTERRUPTED_CHECK or check not in self.verdict.failed_checks():
                self.verdict.fail(why, check=check)   # the checks made so far stay, and say what was seen
        self.close()

    def start(self, job: JobSpec) -> None:
        """Start the job and the watchers; returns once every node process is started."""
        self.job = job
        self.phase("starting", nodes=job.nodes)
        self.platform.start(job)
        self.workdir = self.platform.job_workdir()
        w = job_watchers(self.platform, self.timeline, job, self.workdir, self.report_dir)
        self.script_lines, self._follower, self._disk = w.script_lines, w.follower, w.disk
        self.ckpt_watcher, self.node_roots = w.checkpoint, w.node_roots
        for watcher in w.all():
            self.add_watcher(watcher)

    def add_watcher(self, watcher: Watcher) -> Watcher:
        """Start ``watcher`` and make it part of the run: close() stops it, and if its
        thread dies the run fails (every wait raises WatcherDied at once, the verdict
        fails its ``watcher`` check). ``start()`` adds the job's own watchers."""
        self._watchers.append(watcher)
        watcher.start()
        return watcher

    def close(self) -> None:
        """Revert faults, stop watchers and the job, then write report.json. Idempotent.

        Ctrl-C or SIGTERM during close does not interrupt it (elastic_chaos.signals.deferred): a
        second one says stopping is under way, a third force-exits saying what may be left."""
        if self._closed:
            return
        self._closed = True
        try:
            with signals.deferred():
                self._teardown()
        finally:
            self._claim.release()

    def _teardown(self) -> None:
        self._settle()
        # what the nodes print from here on (workers failing as their peers stop) is
        # the toolkit tearing the job down, not the job's behaviour: say so first
        self.phase("teardown")
        errors = self.ledger.revert_all()
        for w in self._watchers:
            w.stopping()  # the job going away below is not news worth an event
        try:
            self.platform.stop()
        except Exception as exc:  # noqa: BLE001 - teardown goes on; the error is the toolkit's check
            errors.append(said(exc))
        died: list[str] = []
        for w in self._watchers:
            try:
                w.stop()
            except DiskFull:   # said below, once the reserve makes room to say it
                pass
            except WatcherDied as exc:   # the run was partly blind: it cannot pass
                died.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - as above
                errors.append(said(exc))
        problems = [(f"cleanup: {e}", "cleanup") for e in errors]
        known = self.verdict is not None and DISK_CHECK in self.verdict.failed_checks()
        problems += disk.room_for_the_report(self.report_dir, self.timeline, self._disk, said_already=known)
        problems += [(d, "watcher") for d in died if self.verdict is None
                     or not any(c.name == "watcher" and c.reason == d for c in self.verdict.checks)]
        # whatever the scenario asserted, two worlds training at once is a failure
        problems += [(f"one job trains as one world: {b.describe()}", "split-brain") for b in self.split_brains()]
        if problems:
            self.verdict = self.verdict or Verdict()
            for reason, check in problems:
                self.verdict.fail(reason, check=check)
        self.phase("finished")
        result = self.result()
        if self.closing_checks is not None and self.verdict is not None:
            # made from the final result, so a check's count is report.json's (saves seen up to teardown)
            self.verdict.checks.extend(self.closing_checks(result))
            result = dataclasses.replace(result, verdict=self.verdict)
        events = self.timeline.events()
        self.report = RunReport(self.report_dir, result, events, node_logs=self.platform.node_logs(),
                                missing=tuple(missing_in(result, events)))
        try:
            self.rendered = write_report(self.report)
        except (OSError, ChaosError) as exc:   # the disk filled past the reserve: say where the evidence is
            self.unwritten = (f"the report could not be written ({said(exc)}); the evidence is in {self.report_dir} "
                              "(timeline.jsonl, nodes/*.log): free some space and run `elastic-chaos report "
                              f"{self.report_dir}`")
            log.error("%s", self.unwritten)
        self.timeline.close()

    def _settle(self) -> None:
        """A job that recovered trains a few more steps before it is torn down (at most SETTLE_S), so
        the report's step chart shows training after the recovery, not a line that ends at it. Never
        fatal: a job that stops training here is simply torn down."""
        faults = self.ledger.records
        if not faults or self.job is None or (self._disk is not None and self._disk.full is not None) \
                or analysis.training_finished(self.timeline.events()) is not None:   # no step is coming
            return
        after = [e.data.step for e in self.timeline.select(ProgressEv.STEP)
                 if e.t > max(r.injected_at for r in faults)]
        if not after:
            return   # it never trained again: nothing to show, no reason to wait
        target = max(after) + SETTLE_STEPS
        self.phase("settling", target_step=target)
        began = time.monotonic()
        if self.timeline.wait_for(lambda e: e.type == ProgressEv.STEP and e.data.step >= target, timeout=SETTLE_S):
            time.sleep(max(0.0, SETTLE_MIN_S - (time.monotonic() - began)))  # fast steps: still visible

    def phase(self, name: str, **data: Any) -> None:
        self._phase = name
        self.timeline.emit(RunnerEv.PHASE, None, Phase(phase=name, **data))

    # -- waiting ------------------------------------------------------------
    def wait_for(self, what: str, predicate: Callable[[Event], bool], timeout: float) -> Event:
        """Block until an event matches; fail fast if the job died for good (JobFailed)
        or a watcher died (WatcherDied: what it would have seen will never come)."""
        deadline = time.monotonic() + timeout
        since = 0
        while True:
            left = deadline - time.monotonic()
            scanned = len(self.timeline)
            ev = self.timeline.wait_for(predicate, timeout=min(max(left, 0), 1.0), since=since)
            if ev is not None:
                return ev
            since = scanned  # each event is judged once, not once a second
            self._check_alive(what)
            if time.monotonic() >= deadline:
                raise RecoveryTimeout(what, timeout, self.last_progress())

    def job_gone(self) -> bool:
        """Every node has exited or was lost, and no replacement is on its way."""
        nodes = self.platform.nodes()
        return bool(nodes) and not any(n.state.is_alive() for n in nodes) \
            and not self.platform.replacement_pending()

    def _check_alive(self, what: str) -> None:
        """Raise WatcherDied if a watcher died (the timeline went blind), JobFinished if its training ended on
        its own (at once: a finished job's agents may wait minutes for each other), JobFailed if the job is
        gone for good."""
        for w in self._watchers:
            w.check()
        finished = analysis.training_finished(self.timeline.events())
        if finished is not None:
            raise JobFinished(what, finished)
        if self.job_gone():
            outcome = analysis.job_outcome(self.timeline.events(), self.job)
            tails = "\n".join(f"--- {name} (last lines) ---\n{tail(path)}"
                              for name, path in self.platform.node_logs().items())
            raise JobFailed(f"while waiting for {what}: the job failed permanently: "
                            f"{'; '.join(outcome.reasons)}\n{tails}", outcome)

    def wait_for_job_end(self, timeout: float = 180.0) -> analysis.JobOutcome:
        """Block until every node is gone for good (a job expected to die); return why.
        RecoveryTimeout after ``timeout``; WatcherDied at once if a watcher died."""
        self.phase("awaiting_job_end")

        def ended() -> bool:
            for w in self._watchers:
                w.check()
            return self.job_gone()

        if not eventually(ended, timeout_s=timeout, interval_s=0.5):
            raise RecoveryTimeout("the job to end", timeout, self.last_progress())
        time.sleep(0.5)  # let the log followers read the last lines
        return analysis.job_outcome(self.timeline.events(), self.job)

    def outcome(self) -> analysis.JobOutcome:
        """How the job ended so far (running, finished, or failed and why), from the evidence."""
        return analysis.job_outcome(self.timeline.events(), self.job)

    def last_progress(self) -> str:
        steps = self.timeline.select(ProgressEv.STEP)
        if not steps:
            regex = self.job.observe.progress_regex if self.job else None
            if regex and self.script_lines is not None and self.script_lines.lines_seen == 0:
                return (f"no training step yet (the script printed nothing at all: {self.report_dir / 'nodes'}"
                        "/*.log hold only torchrun's own lines; --progress-regex reads what the script prints "
                        "to stdout or stderr, so it must print its steps there, not only to a file)")
            return "no training step yet" + (f" (no line matched --progress-regex {regex!r}; compare it "
                                             f"with {self.report_dir / 'nodes'}/*.log)" if regex else "")
        e = steps[-1]
        return f"step {e.data.step} on {e.node} at world size {e.data.world_size}"

    def wait_for_step(self, step: int, timeout: float = 120.0) -> Event:
        """Steady state: block until some rank has completed ``step``."""
        self.phase("steady_state", target_step=step)
        unit = self.job.observe.unit if self.job is not None else "step"
        return self.wait_for(f"training {unit} {step}",
                             lambda e: e.type == ProgressEv.STEP and e.data.step >= step, timeout)

    def wait_until_steady(self, step: int, *, timeout: float = 120.0, checkpoint_bound: bool = True) -> Event:
        """Steady state before a fault: block until some rank has completed ``step``, then check
        that the job is steady (elastic_chaos.analysis.steady: at the size it was started with, no failure
        since it started, a checkpoint saved where ``checkpoint_bound`` relies on one); NotSteady
        says what is not so. The wait settles first: events of the step's instant are read."""
        reached = self.wait_for_step(step, timeout)
        began = time.monotonic()
        self._read_past(reached.t)   # the lines written with the step (a failure beside it) are read
        assert self.job is not None, "start the job first"
        problems, why = steady_problems(self.timeline, self.job, reached, self.workdir, self.ckpt_watcher,
                                        checkpoint_bound=checkpoint_bound)
        if problems:
            self.phase("not_steady")
            raise NotSteady(problems)
        self.phase("steady", step=reached.data.step, waited_s=round(time.monotonic() - began, 3), why=why)
        return reached

    def _read_past(self, t: float, limit_s: float = READ_PAST_S) -> None:
        """Block until the node logs have been read past ``t`` (at most ``limit_s``): what a node wrote
        up to then is on the timeline."""
        follower = self._follower
        if follower is None:
            return
        eventually(lambda: follower.read_until > t + LINE_SLACK_S, timeout_s=limit_s, interval_s=0.02)

    def wait_for_steps(self, count: int, timeout: float = 120.0) -> Event:
        """Block until training has advanced ``count`` steps past the latest one seen."""
        steps = [e.data.step for e in self.timeline.select(ProgressEv.STEP)]
        return self.wait_for_step(max(steps, default=0) + count, timeout)

    # -- faults (the ledger reverts them all in close()) --------------------------
    @property
    def faults(self) -> list[FaultRecord]:
        """Every fault injected so far, in order."""
        return self.ledger.records

    def inject(self, fault: Fault, *, trigger: str | None = None) -> FaultRecord:
        """Inject ``fault`` now; see FaultLedger.inject."""
        return self.ledger.inject(fault, trigger=trigger)

    def arm(self, fault: Fault, trigger: Trigger) -> ArmedFault:
        """Inject ``fault`` when ``trigger`` matches a later event; returns at once."""
        return self.ledger.arm(fault, trigger)

    def revert(self, record: FaultRecord) -> None:
        """Undo the fault of ``record`` now. Idempotent."""
        self.ledger.revert(record)

    def repeat(self, make_fault: Callable[[], Fault], *, mtbf_s: float, duration_s: float,
               seed: int = 0, min_alive: int = 1) -> list[FaultRecord]:
        """Faults as a Poisson process; see FaultLedger.repeat."""
        return self.ledger.repeat(make_fault, mtbf_s=mtbf_s, duration_s=duration_s, seed=seed, min_alive=min_alive)

    # -- observing ------------------------------------------------------------
    def wait_for_recovery(self, fault: FaultRecord, *, timeout: float = 180.0,
                          world_size: int | None = None) -> Recovery:
        """Block until progress passes the pre-fault step (and, if given, training
        runs at ``world_size``); then return the fault's Recovery."""
        self.phase("recovering", fault=fault.fault, target=fault.target)
        tracker = self._tracker(fault)

        def regained(e: Event) -> bool:
            if world_size is not None and e.type == ProgressEv.STEP and e.data.world_size != world_size:
                return False
            return tracker.regained(e)

        self.wait_for(f"recovery from {fault.fault} on {fault.target}"
                      + (f" at world size {world_size}" if world_size else ""), regained, timeout)
        time.sleep(0.3)  # let the watchers flush the events around the regain
        return self.recovery(fault)

    def wait_for_world_size(self, fault: FaultRecord, world_size: int, *,
                            timeout: float = 180.0) -> Recovery:
        """Block until training runs at ``world_size`` again after ``fault`` (a
        replacement joined, or a scale-up formed the larger world)."""
        self.phase("awaiting_world_size", world_size=world_size)
        self.wait_for(f"training at world size {world_size} after {fault.fault}",
                      trains_at_size(world_size, after=fault.injected_at), timeout)
        time.sleep(0.3)
        return self.recovery(fault)

    def recovery(self, fault: FaultRecord) -> Recovery:
        """The fault's Recovery so far. A later fault fired by a trigger (a cascade)
        is part of this recovery; an independent one ends its window. The last one read is
        the one the report shows (``judged``): what a hypothesis checked is what it says."""
        until = window_end(fault.injected_at, [(f.injected_at, f.trigger is not None) for f in self.faults])
        rec = self._tracker(fault).measure(until)
        self.judged[fault.injected_at] = rec
        return rec

    def _tracker(self, fault: FaultRecord) -> RecoveryTracker:
        return RecoveryTracker(fault.fault, fault.target, fault.injected_at, self.timeline.events,
                               max_restarts=self.job.max_restarts if self.job else None,
                               unit=self.job.observe.unit if self.job else "step")

    def recoveries(self) -> list[Recovery]:
        return [self.recovery(f) for f in self.faults]

    def result(self) -> RunResult:
        """What the run found so far, as report.json records it: its verdict, each fault with
        its metric groups, the run's groups, goodput, split brains, samples, what a script let
        us see (elastic_chaos.analysis.result.build_result: the same measurement a crashed run's
        folder gets from its timeline)."""
        logs = self.platform.node_logs()
        return build_result(
            self.timeline.events(), self.faults, scenario=self.scenario, platform=self.platform.name, job=self.job,
            verdict=self.verdict, started_at=self.started_at, finished_at=time.time(), end=self._evidence_end(),
            observation=self.observation(), judged=self.judged, log_utc_offset_s=self._log_utc_offset_s,
            final_state=self.final_state,
            node_logs={name: str(path.relative_to(self.report_dir)) if path.is_relative_to(self.report_dir)
                       else str(path) for name, path in logs.items()})

    def observation(self) -> ScriptObservation | None:
        """What could be seen of a script job, and what not (report.json's
        ``observation``; None for the reference trainer)."""
        from elastic_chaos.analysis.observation import summarize
        return summarize(self.timeline.events(), self.job, self.workdir,
                         node_workdirs=self.node_roots.seen if self.node_roots is not None else None)

    def split_brains(self) -> list[SplitBrain]:
        """Times two worlds of this job trained at once (see elastic_chaos.analysis.invariants)."""
        return split_brains(self.timeline.events())

    @property
    def samples(self) -> SampleAccount:
        """Exactly-once accounting of the committed training history so far."""
        return account_samples(self.timeline.events())

    @property
    def goodput(self) -> float | None:
        """Useful step time / wall time since the first step (None before two steps)."""
        return goodput(self.timeline.events(), end=self._evidence_end())

    def _evidence_end(self) -> float:
        """Until when the run's evidence of training counts: now, or when the job's training finished on its
        own (a wait after it, such as a final-state reference run, is not downtime of the job)."""
        finished = analysis.training_finished(self.timeline.events())
        return finished.t if finished is not None else time.time()


def trains_at_size(world_size: int, *, after: float) -> Callable[[Event], bool]:
    """A predicate for ``wait_for``, fed every event in order: a step at ``world_size`` by a
    worker generation its agent started after ``after``. The survivors go on stepping at the
    old size for a moment after a fault (a drain's eviction breaks their collective only
    when the evicted trainer exits): a step of theirs once ended the wait for a re-created
    pod before that pod was even scheduled."""
    restarted: set[str | None] = set()

    def at_size(e: Event) -> bool:
        if e.t <= after:
            return False
        if e.type == AgentEv.WORKERS_STARTING:
            restarted.add(e.node)
            return False
        return e.type == ProgressEv.STEP and e.data.world_size == world_size and e.node in restarted

    return at_size
