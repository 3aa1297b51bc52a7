"""What a game day may aim at: the job's nodes as EC2 instances, chosen within limits.

The *population* is every node of the targeted job (its worker pods' machines
on EKS) or, without Kubernetes, every instance carrying all the given tags.
Nothing outside it is ever a target: explicit names must be in it, tags only
narrow it, and :func:`~elastic_chaos.platforms.aws.guard.check_blast_radius` refuses
more targets than ``--max-nodes`` / ``--max-percent`` allow before any call
that changes something. The choice is deterministic: the newest live nodes
(as ``pick_victim`` does on every platform): the population comes oldest first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from elastic_chaos.errors import FaultUnavailable, SpecError
from elastic_chaos.platforms.aws.actions import AwsActions
from elastic_chaos.platforms.aws.clients import (
    AwsClients,
    Instance,
    ScalingGroup,
    account_id,
    describe_groups,
    describe_instances,
)
from elastic_chaos.platforms.aws.guard import Guard, SafetyLimits, UnsafeOperation, check_blast_radius


@dataclass(frozen=True)
class Target:
    """One node of the job: its EC2 instance and, on EKS, its Kubernetes node and pods."""

    instance: Instance
    machine: str | None = None
    pods: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """What the game day calls it: the Kubernetes node, else the instance id."""
        return self.machine or self.instance.id

    def describe(self) -> str:
        i = self.instance
        kind = "spot" if i.spot else "on-demand"
        where = f"node {self.machine} = " if self.machine else ""
        pods = f", pods {', '.join(self.pods)}" if self.pods else ""
        return (f"{where}{i.id} ({kind} {i.instance_type or '?'} in {i.zone or '?'}, {i.state}, "
                f"group {i.asg or '-'}{pods})")


@runtime_checkable
class AwsTargetable(Protocol):
    """A platform the AWS faults can aim at (eks, ec2)."""

    aws_side: AwsSide

    def aws_population(self) -> list[Target]:
        """Every node of the targeted job, oldest first (reads only)."""


class AwsSide:
    """The AWS half of a platform: clients, guarded actions, limits, target choice."""

    def __init__(self, clients: AwsClients, guard: Guard, *, run_id: str, limits: SafetyLimits,
                 tags: dict[str, str] | None = None, fis_role_arn: str | None = None,
                 stop_alarm: str | None = None) -> None:
        self.clients = clients
        self.guard = guard
        self.limits = limits
        self.tags = dict(tags or {})
        self.fis_role_arn = fis_role_arn
        self.stop_alarm = stop_alarm
        self.actions = AwsActions(clients, guard, run_id=run_id)
        self._account: str | None = None

    @property
    def region(self) -> str:
        if not self.clients.region:
            raise SpecError("no AWS region known: pass --region")
        return self.clients.region

    def account(self) -> str:
        if self._account is None:
            self._account = account_id(self.clients.sts)
        return self._account

    def arn(self, instance: Instance) -> str:
        return instance.arn(self.region, self.account())

    def by_tags(self) -> list[Target]:
        """Every live instance carrying all of ``tags`` (refused without tags: never 'all')."""
        if not self.tags:
            raise UnsafeOperation("no --tag given: a game day without a job aims only at instances carrying "
                                  "the tags you name (e.g. --tag eks:nodegroup-name=gpu-spot)")
        return [Target(i) for i in describe_instances(self.clients.ec2, tags=self.tags) if i.alive()]

    def instances(self, ids: list[str]) -> dict[str, Instance]:
        return {i.id: i for i in describe_instances(self.clients.ec2, ids=ids)}

    def groups_of(self, targets: list[Target]) -> list[ScalingGroup]:
        return describe_groups(self.clients.autoscaling, sorted({t.instance.asg for t in targets if t.instance.asg}))

    def choose(self, population: list[Target], count: int, *, spot_only: bool = False,
               names: tuple[str, ...] = ()) -> list[Target]:
        """``count`` targets (the newest live ones, or the named ones), within the limits.
        Raises UnsafeOperation beyond the blast radius, FaultUnavailable when none qualifies."""
        alive = [t for t in population if t.instance.alive()]
        if names:
            known = {t.name: t for t in alive} | {t.instance.id: t for t in alive}
            strays = [n for n in names if n not in known]
            if strays:
                raise UnsafeOperation(f"{strays} are not live nodes of the targeted job/tags "
                                      f"(those are: {sorted(t.name for t in alive)}); refusing to aim at them")
            chosen = [known[n] for n in names]
        else:
            candidates = [t for t in alive if t.instance.spot] if spot_only else alive
            if not candidates:
                what = "spot instance" if spot_only else "live node"
                raise FaultUnavailable(f"none of the {len(alive)} live node(s) of the target is a {what}")
            chosen = candidates[-count:]     # the population comes oldest first
        if spot_only and any(not t.instance.spot for t in chosen):
            raise FaultUnavailable(f"{[t.name for t in chosen if not t.instance.spot]} are not spot instances: "
                                   "FIS can only interrupt spot instances (use terminate-instance)")
        check_blast_radius([t.name for t in chosen], [t.name for t in alive], self.limits)
        return chosen
