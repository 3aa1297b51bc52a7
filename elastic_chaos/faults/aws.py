"""Faults only AWS can inject: a real spot interruption, a dead instance, no capacity.

- ``spot-interruption`` (on eks/ec2; the local platform's fault of the same name
  plays it with a metadata stand-in): an AWS FIS experiment with
  ``aws:ec2:send-spot-instance-interruptions``. AWS publishes the rebalance
  recommendation at once and the interruption notice two minutes before it
  interrupts the instance at ``durationBeforeInterruption`` (``notice_s``).
  The experiment is followed to completion and its template deleted.
- ``terminate-instance``: EC2 TerminateInstances, no notice (a host that dies;
  the OS still shuts down, so pods get SIGTERM if the kubelet is quick).
- ``insufficient-capacity``: FIS ``aws:ec2:asg-insufficient-instance-capacity-error``
  on the targets' Auto Scaling group for ``duration_s`` and, while it holds, the
  targets are terminated: no replacement can be had, the job must go on smaller.

Targets are the newest live nodes of the job (or the named ones), chosen by
:meth:`AwsSide.choose` within the blast radius. ``plan()`` resolves them with
reads only; every call that changes something goes through the platform's
Guard, so under ``--dry-run`` ``inject()`` walks the same path and makes none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from elastic_chaos.errors import FaultUnavailable, SpecError
from elastic_chaos.events import FaultEv, Timeline
from elastic_chaos.events.fault_events import FisState
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.api import Fault, FaultPlan, StopCheck
from elastic_chaos.platforms.api import Hit, Platform
from elastic_chaos.platforms.aws.actions import (
    ExperimentOutcome,
    insufficient_capacity_template,
    iso_duration,
    spot_interruption_template,
)
from elastic_chaos.platforms.aws.clients import ScalingGroup, alarm_arn
from elastic_chaos.platforms.aws.targets import AwsSide, AwsTargetable, Target


def _aws(platform: Platform, kind: str) -> tuple[AwsTargetable, AwsSide]:
    if not isinstance(platform, AwsTargetable):
        raise FaultUnavailable(f"{kind} is an AWS fault: it needs --platform eks (or a game day with --tag); "
                               f"this run uses {platform.name}")
    return platform, platform.aws_side


@dataclass
class AwsFault(Fault):
    count: int = 1
    """How many nodes to hit (within --max-nodes / --max-percent)."""
    targets: tuple[str, ...] = ()
    """Nodes (Kubernetes node names or instance ids) to hit instead of the newest."""
    timeout_s: float = 1200.0
    """How long to follow an experiment before stopping it."""
    poll_s: float = 5.0
    should_stop: StopCheck = field(default=lambda: None, repr=False)
    """Polled while an experiment runs: a reason stops it (the game day's stop conditions)."""
    spot_only: ClassVar[bool] = False
    platforms: ClassVar[tuple[str, ...]] = ("eks", "ec2")
    _chosen: list[Target] = field(default_factory=list, init=False, repr=False)

    def stop_when(self, check: StopCheck) -> None:
        self.should_stop = check

    @property
    def chosen(self) -> list[Target]:
        """The targets ``plan()`` chose (within the blast radius), oldest first."""
        return list(self._chosen)

    def _choose(self, platform: Platform) -> tuple[AwsSide, list[Target]]:
        owner, side = _aws(platform, self.name)
        if self.count < 1:
            raise SpecError("--count must be at least 1")
        self._chosen = side.choose(owner.aws_population(), self.count, spot_only=self.spot_only, names=self.targets)
        return side, self._chosen

    def _stop_alarm_arn(self, side: AwsSide) -> str | None:
        return alarm_arn(side.clients.cloudwatch, side.stop_alarm) if side.stop_alarm else None

    def _record(self, side: AwsSide, chosen: list[Target], at: float, action: str, **detail: object) -> FaultRecord:
        first = chosen[0]
        hit = Hit(node=first.name, at=at, action=action,
                  detail={"instances": [t.instance.id for t in chosen], "machines": [t.machine for t in chosen],
                          "pods": [p for t in chosen for p in t.pods], "dry_run": side.guard.dry_run})
        return FaultRecord(self.name, first.name, at, hit, detail=dict(detail))


def _experiment_detail(outcome: ExperimentOutcome) -> dict[str, object]:
    return {"template_id": outcome.template_id, "experiment_id": outcome.experiment_id, "status": outcome.status,
            "reason": outcome.reason, "started_at": outcome.started_at, "ended_at": outcome.ended_at,
            "states": [[round(t, 3), s] for t, s in outcome.states], "stopped_because": outcome.stopped_because}


@dataclass
class FisSpotInterruption(AwsFault):
    """A real EC2 spot interruption through AWS FIS (rebalance, 2-minute notice, interruption)."""

    notice_s: float = 120.0
    """durationBeforeInterruption: from the experiment's start to the interruption (120..900)."""
    name: ClassVar[str] = "spot-interruption"
    description: ClassVar[str] = ("AWS FIS send-spot-instance-interruptions: rebalance recommendation, "
                                  "2-minute notice, interruption of the instance under a worker")
    spot_only: ClassVar[bool] = True

    def plan(self, platform: Platform) -> FaultPlan:
        side, chosen = self._choose(platform)
        names = ", ".join(t.describe() for t in chosen)
        return FaultPlan(self.name, chosen[0].name, (
            f"fis:CreateExperimentTemplate {SPOT_ACTION_NOTE} durationBeforeInterruption="
            f"{iso_duration(self.notice_s)} on {names}",
            "fis:StartExperiment; fis:GetExperiment every "
            f"{self.poll_s:g}s until completed (StopExperiment on a stop condition)",
            "fis:DeleteExperimentTemplate"))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        side, chosen = _aws(platform, self.name)[1], self._chosen or self._choose(platform)[1]
        template = spot_interruption_template([side.arn(t.instance) for t in chosen], before_s=self.notice_s,
                                              role_arn=side.fis_role_arn or "", run_id=side.actions.run_id,
                                              stop_alarm_arn=self._stop_alarm_arn(side))

        def on_state(status: str, reason: str) -> None:
            timeline.emit(FaultEv.FIS_STATE, chosen[0].name, FisState(status=status, reason=reason))
        outcome = side.actions.run_experiment(template, timeout_s=self.timeout_s, poll_s=self.poll_s,
                                              should_stop=self.should_stop, on_state=on_state)
        # AWS interrupts the instance durationBeforeInterruption after the start, and the experiment
        # completes once it has; whichever is seen first is when the node went away
        at = min(outcome.started_at + self.notice_s, outcome.ended_at or float("inf"))
        return self._record(side, chosen, at, "fis-spot-interruption", notice_at=outcome.started_at,
                            notice_s=self.notice_s, **_experiment_detail(outcome))


SPOT_ACTION_NOTE = "aws:ec2:send-spot-instance-interruptions"


@dataclass
class TerminateInstance(AwsFault):
    """EC2 TerminateInstances on the instance under a worker: no notice."""

    name: ClassVar[str] = "terminate-instance"
    description: ClassVar[str] = "EC2 TerminateInstances on the instance under a worker (no notice)"

    def plan(self, platform: Platform) -> FaultPlan:
        _, chosen = self._choose(platform)
        return FaultPlan(self.name, chosen[0].name, tuple(
            f"ec2:TerminateInstances {t.describe()}" for t in chosen))

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        side, chosen = _aws(platform, self.name)[1], self._chosen or self._choose(platform)[1]
        at = side.actions.terminate([t.instance.id for t in chosen])
        return self._record(side, chosen, at, "ec2-terminate")


@dataclass
class InsufficientCapacity(AwsFault):
    """No capacity for the node group (FIS ICE on its ASG) while its targets are terminated."""

    duration_s: float = 600.0
    """How long every launch of the group fails."""
    zones: tuple[str, ...] = ()
    """Zones to starve (default: every zone of the group)."""
    name: ClassVar[str] = "insufficient-capacity"
    description: ClassVar[str] = ("AWS FIS asg-insufficient-instance-capacity-error on the workers' group, then "
                                  "terminate a worker: no replacement can be had")

    def plan(self, platform: Platform) -> FaultPlan:
        side, chosen = self._choose(platform)
        group = self._group(side, chosen)
        zones = ",".join(self.zones or group.zones)
        return FaultPlan(self.name, chosen[0].name, (
            f"fis:CreateExperimentTemplate aws:ec2:asg-insufficient-instance-capacity-error on {group.name} "
            f"zones={zones} duration={iso_duration(self.duration_s)}",
            "fis:StartExperiment",
            *(f"ec2:TerminateInstances {t.describe()}" for t in chosen),
            f"fis:GetExperiment every {self.poll_s:g}s until completed", "fis:DeleteExperimentTemplate"))

    def _group(self, side: AwsSide, chosen: list[Target]) -> ScalingGroup:
        groups = side.groups_of(chosen)
        if len(groups) != 1:
            raise FaultUnavailable(f"insufficient-capacity starves one Auto Scaling group; the targets belong to "
                                   f"{[g.name for g in groups] or 'none'} (aws:autoscaling:groupName tag)")
        return groups[0]

    def _inject(self, platform: Platform, plan: FaultPlan, timeline: Timeline) -> FaultRecord:
        side, chosen = _aws(platform, self.name)[1], self._chosen or self._choose(platform)[1]
        group = self._group(side, chosen)
        template = insufficient_capacity_template(group.arn, list(self.zones or group.zones),
                                                  duration_s=self.duration_s, role_arn=side.fis_role_arn or "",
                                                  run_id=side.actions.run_id, stop_alarm_arn=self._stop_alarm_arn(side))
        terminated: list[float] = []
        outcome = side.actions.run_experiment(
            template, timeout_s=self.duration_s + self.timeout_s, poll_s=self.poll_s, should_stop=self.should_stop,
            during=lambda: terminated.append(side.actions.terminate([t.instance.id for t in chosen])))
        at = terminated[0] if terminated else outcome.started_at
        return self._record(side, chosen, at, "fis-ice-and-terminate", group=group.name,
                            duration_s=self.duration_s, **_experiment_detail(outcome))
