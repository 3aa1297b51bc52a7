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
- Templates for the job's pods on EKS: ``aws:eks:pod-network-latency`` (delay and
  jitter) and ``aws:eks:pod-network-packet-loss`` (a loss percentage), netem put in
  the pods by an ephemeral container FIS starts as a Kubernetes service account.
  A link fault holds its degradation until its revert, so these are begun
  (:meth:`AwsActions.begin_experiment`: created, started, running) and ended
  (:meth:`AwsActions.end_experiment`: stopped, template deleted) in two calls.
  Every template passes :func:`~elastic_chaos.platforms.aws.guard.check_fis_template`
  before it is created.

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
from elastic_chaos.platforms.aws.guard import Call, Guard, PodScope, Undo, check_fis_template
from elastic_chaos.waiting import eventually

SPOT_ACTION = "aws:ec2:send-spot-instance-interruptions"
ICE_ACTION = "aws:ec2:asg-insufficient-instance-capacity-error"
# The EKS pod actions' parameters, and the aws:eks:pod target's, as AWS documents them:
# https://docs.aws.amazon.com/fis/latest/userguide/fis-actions-reference.html (Amazon EKS actions),
# https://docs.aws.amazon.com/fis/latest/userguide/eks-pod-actions.html (service account, RBAC, limits),
# https://docs.aws.amazon.com/fis/latest/userguide/targets.html (aws:eks:pod: clusterIdentifier, namespace,
# selectorType, selectorValue)
EKS_LATENCY_ACTION = "aws:eks:pod-network-latency"
EKS_LOSS_ACTION = "aws:eks:pod-network-packet-loss"
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


@dataclass(frozen=True)
class FisPods:
    """The pods an ``aws:eks:pod`` target selects."""

    cluster: str
    """The EKS cluster's name or ARN (FIS's ``clusterIdentifier``)."""
    namespace: str
    selector: str
    """A label selector (``key=value,...``) naming exactly the pods to degrade."""


def _whole(value: float, what: str) -> str:
    """FIS's pod network parameters are whole numbers: ``value`` as one, else SpecError."""
    if abs(value - round(value)) > 1e-6:
        raise SpecError(f"FIS takes {what} as a whole number; {value:g} is not one")
    return str(int(round(value)))


def pod_network_parameters(*, loss: float, delay_ms: float | None, jitter_ms: float) -> dict[str, str]:
    """FIS's parameters for a pod's delay (``delay_ms`` given) or else its loss (a share): whole
    milliseconds, a whole percentage; SpecError for a value FIS cannot take. Pure."""
    if delay_ms is not None:
        return {"delayMilliseconds": _whole(delay_ms, "the delay in milliseconds"),
                "jitterMilliseconds": _whole(jitter_ms, "the jitter in milliseconds")}
    return {"lossPercent": _whole(loss * 100, "the loss as a percentage")}


def pod_latency_template(pods: FisPods, *, delay_ms: float, jitter_ms: float, sources: tuple[str, ...],
                         duration_s: float, service_account: str, role_arn: str, run_id: str,
                         stop_alarm_arn: str | None = None) -> dict[str, Any]:
    """FIS template: the pods' traffic with ``sources`` (IPs/CIDRs; empty: all traffic) delayed
    ``delay_ms`` +- ``jitter_ms`` for at most ``duration_s`` (netem on the pods' interface)."""
    params = pod_network_parameters(loss=0.0, delay_ms=delay_ms, jitter_ms=jitter_ms)
    return _pod_template(pods, "delay", EKS_LATENCY_ACTION, params, sources=sources, duration_s=duration_s,
                         service_account=service_account, role_arn=role_arn, run_id=run_id,
                         stop_alarm_arn=stop_alarm_arn)


def pod_packet_loss_template(pods: FisPods, *, loss: float, sources: tuple[str, ...], duration_s: float,
                             service_account: str, role_arn: str, run_id: str,
                             stop_alarm_arn: str | None = None) -> dict[str, Any]:
    """FIS template: ``loss`` (a share, 0.05 = 5 %) of the pods' traffic with ``sources``
    (IPs/CIDRs; empty: all traffic) dropped for at most ``duration_s``."""
    params = pod_network_parameters(loss=loss, delay_ms=None, jitter_ms=0.0)
    return _pod_template(pods, "loss", EKS_LOSS_ACTION, params, sources=sources, duration_s=duration_s,
                         service_account=service_account, role_arn=role_arn, run_id=run_id,
                         stop_alarm_arn=stop_alarm_arn)


def _pod_template(pods: FisPods, name: str, action_id: str, params: dict[str, str], *, sources: tuple[str, ...],
                  duration_s: float, service_account: str, role_arn: str, run_id: str,
                  stop_alarm_arn: str | None) -> dict[str, Any]:
    if not service_account:
        raise SpecError("FIS's EKS pod actions run as a Kubernetes service account in the job's namespace: name "
                        "it (EksOptions.fis_service_account; docs/EKS.md, 'Link faults', has its Role)")
    params = {"duration": iso_duration(duration_s), "kubernetesServiceAccount": service_account, **params}
    if sources:
        params["sources"] = ",".join(sources)
    target = {"resourceType": "aws:eks:pod", "selectionMode": "ALL",
              "parameters": {"clusterIdentifier": pods.cluster, "namespace": pods.namespace,
                             "selectorType": "labelSelector", "selectorValue": pods.selector}}
    return _template(f"elastic-chaos {run_id}: pod network {name}", role_arn, run_id, stop_alarm_arn,
                     targets={"Pods": target},
                     actions={name: {"actionId": action_id, "parameters": params, "targets": {"Pods": "Pods"}}})


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


@dataclass
class Begun:
    """An experiment begun and not yet ended: what ``end_experiment`` undoes."""

    template_id: str
    experiment_id: str
    template_undo: Undo | None
    experiment_undo: Undo | None
    started_at: float
    status: str = "pending"
    reason: str = ""
    stopped: bool = False
    """Whether ``end_experiment`` had to stop it (False: FIS had ended it, its duration over)."""
    ended: bool = False


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
    def create_template(self, template: dict[str, Any], *, pods: PodScope | None = None) -> tuple[str, Undo | None]:
        """CreateExperimentTemplate; the id is journalled for deletion before this returns.
        UnsafeOperation, before any call, for a template the safety rules do not admit
        (``check_fis_template``: ``pods`` is the job's, the only pods it may aim at)."""
        check_fis_template(template, pods)
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

    # -- an experiment held across calls (a link fault's degradation) ---------------------
    def begin_experiment(self, template: dict[str, Any], *, pods: PodScope | None = None,
                         ready_timeout_s: float = 300.0, poll_s: float = 2.0) -> Begun:
        """Create the template, start it, and return once FIS says it is running (blocks up to
        ``ready_timeout_s``); it then acts until ``end_experiment`` or its own duration.
        InjectionFailed, everything undone, when it ends (failed, say) before it ran or is not
        running in time. In a dry run the calls are recorded and it returns at once."""
        template_id, template_undo = self.create_template(template, pods=pods)
        try:
            experiment_id, experiment_undo = self.start_experiment(template_id)
        except BaseException:
            self.delete_template(template_id)
            self.guard.done(template_undo, "deleted")
            raise
        begun = Begun(template_id, experiment_id, template_undo, experiment_undo, started_at=time.time())
        if self.guard.dry_run:
            return begun
        try:
            self._await_running(begun, timeout_s=ready_timeout_s, poll_s=poll_s)
        except BaseException:
            self.end_experiment(begun, timeout_s=ready_timeout_s, poll_s=poll_s)
            raise
        return begun

    def _await_running(self, begun: Begun, *, timeout_s: float, poll_s: float) -> None:
        def settled() -> bool:
            begun.status, begun.reason = self.experiment_state(begun.experiment_id)
            return begun.status == "running" or begun.status in TERMINAL
        eventually(settled, timeout_s=timeout_s, interval_s=poll_s)
        if begun.status != "running":
            ended = "ended " if begun.status in TERMINAL else "was still "
            raise InjectionFailed(f"FIS experiment {begun.experiment_id} {ended}{begun.status} instead of running "
                                  f"({begun.reason or 'no reason given'}); for an EKS pod action check the service "
                                  "account and its RBAC (docs/EKS.md, 'Link faults')")

    def end_experiment(self, begun: Begun, *, timeout_s: float = 300.0, poll_s: float = 2.0) -> str:
        """StopExperiment unless it already ended, wait (up to ``timeout_s``) until it has,
        then DeleteExperimentTemplate; closes both journal entries. Returns its last status.
        Idempotent: an experiment already ended here is not touched again. RecoveryTimeout
        when it does not stop in time (the template is deleted all the same)."""
        if begun.ended:
            return begun.status
        try:
            if not self.guard.dry_run:
                begun.status, begun.reason = self.experiment_state(begun.experiment_id)
            if begun.status not in TERMINAL:
                self.stop_experiment(begun.experiment_id)
                begun.stopped = True
                if not self.guard.dry_run:
                    self._await_end(begun, timeout_s=timeout_s, poll_s=poll_s)
            self.guard.done(begun.experiment_undo, begun.status)
        finally:
            self.delete_template(begun.template_id)
            self.guard.done(begun.template_undo, "deleted")
            begun.ended = True
        return begun.status

    def _await_end(self, begun: Begun, *, timeout_s: float, poll_s: float) -> None:
        def ended() -> bool:
            begun.status, begun.reason = self.experiment_state(begun.experiment_id)
            return begun.status in TERMINAL
        if not eventually(ended, timeout_s=timeout_s, interval_s=poll_s):
            raise RecoveryTimeout(f"the FIS experiment {begun.experiment_id} to stop", timeout_s, begun.status)
