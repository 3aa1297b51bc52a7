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

Leaving the block stops everything (also on failure) and writes report.json.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import analysis
from chaos.errors import ChaosError, RecoveryTimeout
from chaos.events import Event, Timeline
from chaos.faults.api import Fault, FaultRecord
from chaos.platforms import create_platform
from chaos.platforms.api import Platform
from chaos.spec import JobSpec
from chaos.watchers.api import Watcher
from chaos.watchers.logs import LogFollower
from chaos.watchers.rendezvous import RendezvousWatcher

log = logging.getLogger(__name__)


class JobFailed(ChaosError):
    """Every node of the job is gone and none is coming back."""


@dataclass
class Verdict:
    passed: bool = True
    reasons: list[str] = field(default_factory=list)

    def require(self, ok: bool, reason: str) -> None:
        """Record one hypothesis check; a failing one turns the verdict to failed."""
        if not ok:
            self.passed = False
        self.reasons.append(("ok: " if ok else "FAILED: ") + reason)


class ChaosRun:
    def __init__(self, report_dir: Path, *, platform: str = "local", scenario: str = "adhoc",
                 platform_options: dict[str, Any] | None = None) -> None:
        self.report_dir = report_dir
        self.report_dir.mkdir(parents=True, exist_ok=True)
        self.scenario = scenario
        self.timeline = Timeline(report_dir / "timeline.jsonl")
        self.platform: Platform = create_platform(platform, self.timeline, report_dir,
                                                  **(platform_options or {}))
        self.job: JobSpec | None = None
        self.faults: list[FaultRecord] = []
        self.verdict: Verdict | None = None
        self.started_at = time.time()
        self._watchers: list[Watcher] = []
        self._closed = False

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> ChaosRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None and self.verdict is None:
            self.verdict = Verdict(False, [f"FAILED: run aborted: {type(exc).__name__}: {exc}"])
        self.close()

    def start(self, job: JobSpec) -> None:
        """Start the job and the watchers; returns once every node process is started."""
        self.job = job
        self.phase("starting", nodes=job.nodes)
        self.platform.start(job)
        self._watchers.append(LogFollower(self.timeline, self.platform.node_logs))
        endpoint = self.platform.etcd_endpoint()
        if endpoint:
            self._watchers.append(RendezvousWatcher(self.timeline, endpoint, job.run_id, self._pid_to_node))
        for w in self._watchers:
            w.start()

    def close(self) -> None:
        """Stop watchers and the job, then write report.json. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        for w in self._watchers:
            w.stopping()  # the job going away below is not news worth an event
        try:
            self.platform.stop()
        except ChaosError as exc:
            errors.append(str(exc))
        for w in self._watchers:
            try:
                w.stop()
            except ChaosError as exc:
                errors.append(str(exc))
        if errors:
            self.verdict = self.verdict or Verdict()
            for e in errors:
                self.verdict.require(False, f"cleanup: {e}")
        self.phase("finished")
        from chaos.report import write_report
        write_report(self)
        self.timeline.close()

    def phase(self, name: str, **data: Any) -> None:
        self.timeline.emit("runner", "phase", phase=name, **data)

    def _pid_to_node(self) -> dict[int, str]:
        return {n.agent_pid: n.name for n in self.platform.nodes() if n.agent_pid}

    # -- waiting ------------------------------------------------------------
    def wait_for(self, what: str, predicate: Callable[[Event], bool], timeout: float) -> Event:
        """Block until an event matches; fail fast if the job died for good."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ev = self.timeline.wait_for(predicate, timeout=min(max(left, 0), 1.0))
            if ev is not None:
                return ev
            self._check_alive(what)
            if time.monotonic() >= deadline:
                raise RecoveryTimeout(what, timeout, self.last_progress())

    def _check_alive(self, what: str) -> None:
        nodes = self.platform.nodes()
        if nodes and not any(n.state.is_alive() for n in nodes) and not self.platform.replacement_pending():
            tails = "\n".join(f"--- {name} (last lines) ---\n{_tail(path)}"
                              for name, path in self.platform.node_logs().items())
            raise JobFailed(f"while waiting for {what}: every node of the job has exited "
                            f"({', '.join(f'{n.name}={n.exit_code}' for n in nodes)}).\n{tails}")

    def last_progress(self) -> str:
        steps = [e for e in self.timeline.events() if e.source == "progress" and e.kind == "step"]
        if not steps:
            return "no training step yet"
        e = steps[-1]
        return f"step {e.data.get('step')} on {e.node} at world size {e.data.get('world_size')}"

    def wait_for_step(self, step: int, timeout: float = 120.0) -> Event:
        """Steady state: block until some rank has completed ``step``."""
        self.phase("steady_state", target_step=step)
        return self.wait_for(f"training step {step}",
                             lambda e: e.source == "progress" and e.kind == "step"
                             and int(e.data.get("step", 0)) >= step, timeout)

    # -- faults -------------------------------------------------------------
    def inject(self, fault: Fault) -> FaultRecord:
        self.phase("inject", fault=fault.kind)
        record = fault.inject(self.platform, self.timeline)
        self.faults.append(record)
        return record

    def wait_for_recovery(self, fault: FaultRecord, *, timeout: float = 180.0,
                          world_size: int | None = None) -> analysis.Recovery:
        """Block until progress passes the pre-fault step (and, if given, training
        runs at ``world_size``); then return the fault's Recovery."""
        self.phase("recovering", fault=fault.kind, target=fault.target)
        pre = analysis.analyze_fault(self.timeline.events(), kind=fault.kind, target=fault.target,
                                     injected_at=fault.injected_at).pre_step or 0

        def regained(e: Event) -> bool:
            return (e.source == "progress" and e.kind == "step" and e.t > fault.injected_at
                    and int(e.data.get("step", 0)) > pre
                    and (world_size is None or e.data.get("world_size") == world_size))

        self.wait_for(f"recovery from {fault.kind} on {fault.target}"
                      + (f" at world size {world_size}" if world_size else ""), regained, timeout)
        time.sleep(0.3)  # let the watchers flush the events around the regain
        return self.recovery(fault)

    def wait_for_world_size(self, fault: FaultRecord, world_size: int, *,
                            timeout: float = 180.0) -> analysis.Recovery:
        """Block until training runs at ``world_size`` again after ``fault`` (a
        replacement joined, or a scale-up formed the larger world)."""
        self.phase("awaiting_world_size", world_size=world_size)

        def at_size(e: Event) -> bool:
            return (e.source == "progress" and e.kind == "step" and e.t > fault.injected_at
                    and e.data.get("world_size") == world_size)

        self.wait_for(f"training at world size {world_size} after {fault.kind}", at_size, timeout)
        time.sleep(0.3)
        return self.recovery(fault)

    def recovery(self, fault: FaultRecord) -> analysis.Recovery:
        events = self.timeline.events()
        later = [f.injected_at for f in self.faults if f.injected_at > fault.injected_at]
        return analysis.analyze_fault(events, kind=fault.kind, target=fault.target,
                                      injected_at=fault.injected_at, until=min(later, default=None))

    def recoveries(self) -> list[analysis.Recovery]:
        return [self.recovery(f) for f in self.faults]


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
