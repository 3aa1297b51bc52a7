"""Faults after which nothing dies: a node that runs slow, a worker that hangs.

- ``straggler``: one node runs ``factor`` times slower for ``duration_s``. Every
  process of the node runs 1/factor of each short cycle and is stopped for the
  rest (the platform's ``slow_node``), so everything the node does, compute,
  its wait for its device, its messages, advances 1/factor as fast: a GPU
  throttled to half its clock, a VM whose host gives it half of its CPU time
  (steal), a node sharing its cores with a noisy neighbour. A synchronous job
  runs at the pace of that node. ``revert()`` restores full speed.
- ``hung-rank``: one worker process is stopped where it is (SIGSTOP): alive,
  its node and agent alive, its peers blocked in their next collective until
  their collective timeout: a rank deadlocked in a kernel, a data loader or a
  lock. ``revert()`` continues it if it is still there (its agent usually
  kills it first, once its peers gave up).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Timeline
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, pick_victim
from elastic_chaos.options import DAY_S, MAX_NODES, option
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.capabilities import Capability, Slower, WorkerHanger

MIN_STOP_S = 0.05
"""The shortest stop of a cycle: the reference trainer's pace tells a stop from a
scheduling delay only beyond 20 ms (elastic_chaos.trainer.pacing.STALL_S)."""
DEFAULT_CYCLE_S = 0.2

REFERENCE_PG_TIMEOUT_S = 60.0
"""The reference trainer's collective timeout when the job sets none (its --pg-timeout)."""


@dataclass
class Straggler(Fault):
    """One node runs ``factor`` times slower: stopped for 1 - 1/factor of every cycle."""

    node: str | None = None
    factor: float = option(2.0, "how many times slower the node runs (2: half speed)", above=1, maximum=100)
    duration_s: float | None = option(20.0, "seconds the node runs slow, then full speed again (none: until the "
                                            "end of the run)", flag="--duration", above=0, units="s", maximum=DAY_S)
    period_s: float | None = option(None, "one run/stop cycle (default 0.2 s, longer for a factor near 1 so "
                                          "that each stop lasts at least 50 ms)", flag="--period", above=0,
                                    units="s", maximum=60)
    name: ClassVar[str] = "straggler"
    description: ClassVar[str] = "slow node: every process of one node runs 1/factor of the time (stop/continue)"
    requires: ClassVar[type[Capability] | None] = Slower

    def __post_init__(self) -> None:
        super().__post_init__()
        stop = self.cycle_s * (1.0 - 1.0 / self.factor)
        if stop < MIN_STOP_S - 1e-9:
            raise SpecError(f"period {self.cycle_s:g}s at factor {self.factor:g} stops the node {stop * 1000:.0f} ms "
                            f"per cycle, below {MIN_STOP_S * 1000:.0f} ms (a stop shorter than that is not told "
                            f"from a scheduling delay); give --period >= "
                            f"{MIN_STOP_S / (1.0 - 1.0 / self.factor):.2f}")

    @property
    def cycle_s(self) -> float:
        """The run/stop cycle: ``period_s``, else the default, long enough for a 50 ms stop."""
        if self.period_s is not None:
            return self.period_s
        return max(DEFAULT_CYCLE_S, MIN_STOP_S / (1.0 - 1.0 / self.factor))

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        run_s = self.cycle_s / self.factor
        until = f"full speed after {self.duration_s:g}s" if self.duration_s is not None else "full speed at teardown"
        return FaultPlan(self.name, target, (f"every {self.cycle_s:g}s, run every process of {target} for "
                                             f"{run_s * 1000:.0f} ms and stop it for the rest", until))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.capability(Slower).slow(plan.target, factor=self.factor, period_s=self.cycle_s)
        return FaultRecord(self.name, plan.target, hit.at, hit,
                           {"factor": self.factor, "period_s": self.cycle_s, "duration_s": self.duration_s})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        assert record.target is not None
        return platform.capability(Slower).restore(record.target)


@dataclass
class HungRank(Fault):
    """One worker process stopped inside training; its process, node and agent stay alive."""

    node: str | None = None
    local_rank: int = option(0, "which worker of the node hangs (its LOCAL_RANK)", minimum=0, maximum=MAX_NODES - 1)
    duration_s: float | None = option(None, "seconds until the worker is continued (default: never; its agent "
                                            "kills it once its peers gave up)", flag="--duration", above=0,
                                      units="s", maximum=DAY_S)
    name: ClassVar[str] = "hung-rank"
    description: ClassVar[str] = ("hung worker: one worker process stopped inside training (SIGSTOP), alive; "
                                  "its peers block in a collective until their timeout")
    requires: ClassVar[type[Capability] | None] = WorkerHanger

    def plan(self, platform: Platform) -> FaultPlan:
        target = pick_victim(platform, self.node)
        resume = f"SIGCONT after {self.duration_s:g}s" if self.duration_s is not None else "SIGCONT at teardown"
        return FaultPlan(self.name, target, (f"SIGSTOP the worker with LOCAL_RANK={self.local_rank} on {target}",
                                             f"{resume} if it is still alive"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        assert plan.target is not None
        hit = platform.capability(WorkerHanger).hang(plan.target, local_rank=self.local_rank)
        return FaultRecord(self.name, plan.target, hit.at, hit,
                           {"local_rank": self.local_rank, "pid": hit.pids[0] if hit.pids else None,
                            "pg_timeout_s": collective_timeout(platform)})

    def _revert(self, platform: Platform, record: FaultRecord) -> Hit | None:
        assert record.target is not None
        pid = record.detail.get("pid")
        return platform.capability(WorkerHanger).resume(record.target, int(pid)) if isinstance(pid, int) else None


def collective_timeout(platform: Platform) -> float | None:
    """The running job's collective timeout: its ``pg_timeout_s``, the reference trainer's
    default without one, None for a script that sets its own."""
    job = platform.job
    if job is None:
        return None
    if job.pg_timeout_s is not None:
        return job.pg_timeout_s
    return None if job.script else REFERENCE_PG_TIMEOUT_S
