"""The destructive AWS calls of a game day, each through the Guard.

- ``terminate``: EC2 TerminateInstances, no notice (a host that dies).
- FIS experiments, from template to cleanup: CreateExperimentTemplate (the
  template id goes into the cleanup journal at once), StartExperiment,
  GetExperiment until completed/stopped/failed (StopExperiment when a stop
  condition fires), DeleteExperimentTemplate (journal entry closed).
  Templates for ``aws:ec2:send-spot-instance-interruptions`` (AWS sends the
  rebalance recommendation at once, the two-minute interruption notice, and
  interrupts at ``durationBeforeInterruption``) and
  ``aws:ec2:asg-insufficient-instance-capacity-error`` (the group's launches
  fail with InsufficientInstanceCapacity for ``duration``).
  With a CloudWatch alarm given, the template carries it as FIS's own stop
  condition, so AWS stops the experiment even if this process has died.

In a dry run the Guard makes no call and the methods return placeholders, so
a dry run walks exactly the code path of the real run and its recorded calls
are the ones the real run would make.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.errors import InjectionFailed, RecoveryTimeout, SpecError
from elastic_chaos.platforms.aws.clients import AwsClients, error_code, refused_loudly
from elastic_chaos.platforms.aws.guard import Call, Guard, Undo
from elastic_chaos.waiting import eventually

SPOT_ACTION = "aws:ec2:send-spot-instance-interruptions"
ICE_ACTION = "aws:ec2:asg-insufficient-instance-capacity-error"
RUN_TAG = "elastic-chaos/run-id"
TERMINAL = ("completed", "stopped", "failed", "cancelled")
GONE = ("ResourceNotFoundException", "InvalidInstanceID.NotFound", "NotFound")


def iso_duration(seconds: float) -> str:
    """ISO 8601 duration FIS reads: 120 -> PT2M, 90 -> PT1M30S."""
    total = int(round(seconds))
    minutes, secs = divmod(total, 60)
    return "PT" + (f"{minutes}M" if minutes else "") + (f"{secs}S" if secs or not minutes else "")


def spot_interruption_template(instance_arns: list[str], *, before_s: float, role_arn: str, run_id: str,
                               stop_alarm_arn: str | None = None) -> dict[str, Any]:
    """FIS template: interrupt these spot instances ``before_s`` after the start (2-15 min)."""
    if not 120 <= before_s <= 900:
        raise SpecError(f"FIS interrupts spot instances 2 to 15 minutes after the start; --notice {before_s:g}s "
                        "is outside 120..900")
    return _template(f"elastic-chaos {run_id}: spot interruption", role_arn, run_id, stop_alarm_arn,
                     targets={"SpotInstances": {"resourceType": "aws:ec2:spot-instance",
                                                "resourceArns": instance_arns, "selectionMode": "ALL"}},
                     actions={"interrupt": {"actionId": SPOT_ACTION,
                                            "parameters": {"durationBeforeInterruption": iso_duration(before_s)},
                                            "targets": {"SpotInstances": "SpotInstances"}}})


def insufficient_capacity_template(group_arn: str, zones: list[str], *, duration_s: float, role_arn: str,
                                   run_id: str, stop_alarm_arn: str | None = None) -> dict[str, Any]:
    """FIS template: every launch of the group in ``zones`` fails for ``duration_s``."""
    if not zones:
        raise SpecError("insufficient-capacity needs the availability zones to starve (the group has none?)")
    return _template(f"elastic-chaos {run_id}: insufficient capacity", role_arn, run_id, stop_alarm_arn,
                     targets={"AutoScalingGroups": {"resourceType": "aws:ec2:autoscaling-group",
                                                    "resourceArns": [group_arn], "selectionMode": "ALL"}},
                     actions={"starve": {"actionId": ICE_ACTION,
                                         "parameters": {"availabilityZoneIdentifiers": ",".join(zones),
                                                        "duration": iso_duration(duration_s), "percentage": "100"},
                                         "targets": {"AutoScalingGroups": "AutoScalingGroups"}}})


def _template(description: str, role_arn: str, run_id: str, stop_alarm_arn: str | None, *,
              targets: dict[str, Any], actions: dict[str, Any]) -> dict[str, Any]:
    if not role_arn:
        raise SpecError("FIS needs a role it can assume to act on EC2/ASG: pass --fis-role-arn "
                        "(docs/EKS.md, 'IAM policy', has the role's policy)")
    stop = ([{"source": "aws:cloudwatch:alarm", "value": stop_alarm_arn}] if stop_alarm_arn
            else [{"source": "none"}])
    return {"description": description, "roleArn": role_arn, "stopConditions": stop, "targets": targets,
            "actions": actions, "tags": {RUN_TAG: run_id}}


@dataclass
class ExperimentOutcome:
    template_id: str
    experiment_id: str
    status: str = "pending"
    reason: str = ""
    started_at: float = 0.0
    ended_at: float | None = None
    states: list[tuple[float, str]] = field(default_factory=list)
    stopped_because: str | None = None


class AwsActions:
    """Destructive AWS calls, all through ``guard``; reads go straight to the clients."""

    def __init__(self, clients: AwsClients, guard: Guard, *, run_id: str) -> None:
        self.clients = clients
        self.guard = guard
        self.run_id = run_id

    # -- EC2 ----------------------------------------------------------------------------
    def terminate(self, instance_ids: list[str]) -> float:
        """TerminateInstances; returns when AWS accepted it (the instances then shut down)."""
        at = time.time()
        call = Call("ec2", "TerminateInstances", ",".join(instance_ids), {"InstanceIds": instance_ids})

        def go() -> None:
            with refused_loudly(f"ec2:TerminateInstances {instance_ids}"):
                self.clients.ec2.terminate_instances(InstanceIds=instance_ids)
        self.guard.mutate(call, go)
        return at

    # -- FIS ----------------------------------------------------------------------------
    def create_template(self, template: dict[str, Any]) -> tuple[str, Undo | None]:
        """CreateExperimentTemplate; the id is journalled for deletion before this returns."""
        token = uuid.uuid4().hex
        call = Call("fis", "CreateExperimentTemplate", template["description"], template)

        def go() -> str:
            with refused_loudly("fis:CreateExperimentTemplate"):
                answer = self.clients.fis.create_experiment_template(clientToken=token, **template)
            return str(answer["experimentTemplate"]["id"])
        template_id = self.guard.mutate(call, go)
        if template_id is None:
            return "<template-id>", None
        return template_id, self.guard.remember("delete-fis-template", template_id, region=self.clients.region)

    def start_experiment(self, template_id: str) -> tuple[str, Undo | None]:
        call = Call("fis", "StartExperiment", template_id, {"experimentTemplateId": template_id,
                                                            "tags": {RUN_TAG: self.run_id}})

        def go() -> str:
            with refused_loudly(f"fis:StartExperiment {template_id}"):
                answer = self.clients.fis.start_experiment(clientToken=uuid.uuid4().hex,
                                                           experimentTemplateId=template_id,
                                                           tags={RUN_TAG: self.run_id})
            return str(answer["experiment"]["id"])
        experiment_id = self.guard.mutate(call, go)
        if experiment_id is None:
            return "<experiment-id>", None
        return experiment_id, self.guard.remember("stop-fis-experiment", experiment_id, region=self.clients.region)

    def experiment_state(self, experiment_id: str) -> tuple[str, str]:
        """(status, reason) of an experiment. A read."""
        with refused_loudly(f"fis:GetExperiment {experiment_id}", destructive=False):
            state = self.clients.fis.get_experiment(id=experiment_id)["experiment"]["state"]
        return str(state.get("status")), str(state.get("reason") or "")

    def stop_experiment(self, experiment_id: str) -> None:
        """StopExperiment (a cleanup call: allowed after a stop condition). Gone is fine."""
        call = Call("fis", "StopExperiment", experiment_id, {"id": experiment_id})
        self.guard.mutate(call, lambda: self._tolerate_gone(
            "fis:StopExperiment", lambda: self.clients.fis.stop_experiment(id=experiment_id)), cleanup=True)

    def delete_template(self, template_id: str) -> None:
        """DeleteExperimentTemplate (cleanup). Idempotent: an already deleted template is fine."""
        call = Call("fis", "DeleteExperimentTemplate", template_id, {"id": template_id})
        self.guard.mutate(call, lambda: self._tolerate_gone(
            "fis:DeleteExperimentTemplate", lambda: self.clients.fis.delete_experiment_template(id=template_id)),
            cleanup=True)

    def _tolerate_gone(self, what: str, fn: Callable[[], Any]) -> str:
        try:
            with refused_loudly(what):
                fn()
            return "ok"
        except InjectionFailed as exc:
            if error_code(exc.__cause__ or exc) in GONE:
                return "already gone"
            raise

    def run_experiment(self, template: dict[str, Any], *, timeout_s: float, poll_s: float = 5.0,
                       should_stop: Callable[[], str | None] = lambda: None,
                       on_state: Callable[[str, str], None] = lambda s, r: None,
                       during: Callable[[], None] | None = None) -> ExperimentOutcome:
        """Create the template, start it, call ``during`` (what to do while it acts), follow it
        to a terminal state, delete the template.

        Blocks until the experiment ends (StopExperiment when ``should_stop`` names a
        reason, or after ``timeout_s``). The template is deleted whatever happened."""
        template_id, template_undo = self.create_template(template)
        try:
            experiment_id, experiment_undo = self.start_experiment(template_id)
            outcome = ExperimentOutcome(template_id, experiment_id, started_at=time.time())
            if during is not None:
                during()
            if self.guard.dry_run:
                return outcome
            self._follow(outcome, timeout_s=timeout_s, poll_s=poll_s, should_stop=should_stop, on_state=on_state)
            self.guard.done(experiment_undo, outcome.status)
            return outcome
        finally:
            self.delete_template(template_id)
            self.guard.done(template_undo, "deleted")

    def _follow(self, outcome: ExperimentOutcome, *, timeout_s: float, poll_s: float,
                should_stop: Callable[[], str | None], on_state: Callable[[str, str], None]) -> None:
        """Poll the experiment until it ends; StopExperiment when ``should_stop`` names a reason or
        ``timeout_s`` passed, then poll on (the stop conditions still checked) until 120 s past the
        timeout, after which RecoveryTimeout."""
        give_up = time.monotonic() + timeout_s + 120

        def ended() -> bool:
            status, reason = self.experiment_state(outcome.experiment_id)
            if not outcome.states or outcome.states[-1][1] != status:
                outcome.states.append((time.time(), status))
                on_state(status, reason)
            outcome.status, outcome.reason = status, reason
            if status in TERMINAL:
                outcome.ended_at = time.time()
                return True
            return False

        def ended_or_stopped() -> bool | str | None:
            return ended() or should_stop()

        why = eventually(ended_or_stopped, timeout_s=timeout_s, interval_s=poll_s)
        if why is True:
            return
        outcome.stopped_because = why or f"the experiment did not end within {timeout_s:.0f}s"
        self.stop_experiment(outcome.experiment_id)

        def ended_after_stop() -> bool:
            if ended():
                return True
            should_stop()   # the conditions keep running (they stop the guard), whatever they say now
            return False

        if not eventually(ended_after_stop, timeout_s=max(0.0, give_up - time.monotonic()), interval_s=poll_s):
            raise RecoveryTimeout("the FIS experiment to stop", timeout_s + 120, outcome.status)
