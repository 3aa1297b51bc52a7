"""The EC2 side of an EKS cluster, read through injected boto3 clients.

A game day needs to know what it is about to hit before it hits anything:
which EC2 instance is under a Kubernetes node (the node's ``providerID``,
``aws:///<zone>/<instance id>``), whether it is spot, which Auto Scaling
group (the EKS managed node group) owns it, and whether a CloudWatch alarm
says to stop. Everything here only *reads*; destructive calls go through
:mod:`aws_guard` (audit log, dry run) in :mod:`aws_actions`.

boto3 is imported by :func:`make_clients` only, and only when a client was
not injected: tests pass real clients pointed at a moto server on loopback.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elastic_chaos.errors import InjectionFailed, PlatformError, SetupError, SpecError

ASG_TAG = "aws:autoscaling:groupName"
NODEGROUP_TAG = "eks:nodegroup-name"
CLUSTER_TAG = "eks:cluster-name"

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z0-9-]*)/(?P<instance>i-[0-9a-f]+)$")
_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException",
           "InvalidClientTokenId", "AuthFailure")

IAM_HINT = "grant it with the least-privilege policy in docs/EKS.md ('IAM policy'), or use other credentials"


@dataclass(frozen=True)
class AwsClients:
    """The boto3 clients a game day uses; any may be None when it is never needed."""

    ec2: Any = None
    autoscaling: Any = None
    fis: Any = None
    cloudwatch: Any = None
    sts: Any = None
    region: str | None = None


def make_clients(*, region: str | None = None, endpoint_url: str | None = None, profile: str | None = None,
                 ec2: Any = None, autoscaling: Any = None, fis: Any = None, cloudwatch: Any = None,
                 sts: Any = None) -> AwsClients:
    """The injected clients, the rest built by boto3 (region, profile, ``AWS_ENDPOINT_URL`` as
    boto3 reads them). Raises SetupError when boto3 is missing or no region is known."""
    given = {"ec2": ec2, "autoscaling": autoscaling, "fis": fis, "cloudwatch": cloudwatch, "sts": sts}
    if all(c is not None for c in given.values()):
        return AwsClients(region=region, **given)
    try:
        import boto3
    except ImportError as exc:
        raise SetupError("the eks platform needs boto3: pip install 'elastic-chaos[aws]' (make install does)") from exc
    session = boto3.session.Session(profile_name=profile, region_name=region)
    if session.region_name is None:
        raise SetupError("no AWS region: pass --region (or set AWS_REGION / a profile with a region)")
    built = {name: client if client is not None else session.client(name, endpoint_url=endpoint_url)
             for name, client in given.items()}
    return AwsClients(region=session.region_name, **built)


# -- errors -----------------------------------------------------------------------------
def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError (None for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = (response.get("Error") or {}).get("Code")
        return str(code) if code else None
    return None


def describe_error(exc: BaseException) -> str:
    code = error_code(exc)
    if code is None:
        return f"{type(exc).__name__}: {exc}"
    message = (getattr(exc, "response", {}).get("Error") or {}).get("Message") or ""
    hint = f" -- {IAM_HINT}" if code in _DENIED else ""
    return f"{code}: {message}{hint}"


@contextmanager
def refused_loudly(what: str, *, destructive: bool = True) -> Iterator[None]:
    """An AWS refusal is never a success: raise InjectionFailed (destructive) or
    PlatformError (a read) saying what was refused and what to do."""
    try:
        yield
    except Exception as exc:
        if error_code(exc) is None and not _is_botocore(exc):
            raise
        cls = InjectionFailed if destructive else PlatformError
        raise cls(f"{what} failed: {describe_error(exc)}") from exc


def _is_botocore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("botocore", "boto3"))


# -- instances ----------------------------------------------------------------------------
def instance_id_from_provider_id(provider_id: str) -> str:
    """``aws:///us-west-2a/i-0abc`` -> ``i-0abc``. SpecError for a node that is not an EC2 instance."""
    match = _PROVIDER_ID.match(provider_id or "")
    if match is None:
        raise SpecError(f"providerID {provider_id!r} is not an EC2 instance (aws:///<zone>/i-...): "
                        "is this node part of an EKS cluster?")
    return match.group("instance")


@dataclass(frozen=True)
class Instance:
    """One EC2 instance as DescribeInstances shows it."""

    id: str
    state: str
    """pending, running, shutting-down, terminated, stopping, stopped."""
    spot: bool
    zone: str | None
    instance_type: str | None
    launch_time: float | None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def asg(self) -> str | None:
        return self.tags.get(ASG_TAG)

    @property
    def node_group(self) -> str | None:
        return self.tags.get(NODEGROUP_TAG)

    def alive(self) -> bool:
        return self.state in ("pending", "running")

    def arn(self, region: str, account: str) -> str:
        return f"arn:aws:ec2:{region}:{account}:instance/{self.id}"

    def matches(self, tags: dict[str, str]) -> bool:
        """Whether every given tag is on this instance with that value ('*' = any value)."""
        return all(k in self.tags and (v == "*" or self.tags[k] == v) for k, v in tags.items())

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "spot": self.spot, "zone": self.zone,
                "type": self.instance_type, "asg": self.asg, "node_group": self.node_group}


def _instance(raw: dict[str, Any]) -> Instance:
    launch = raw.get("LaunchTime")
    return Instance(
        id=str(raw["InstanceId"]), state=str((raw.get("State") or {}).get("Name", "unknown")),
        spot=raw.get("InstanceLifecycle") == "spot", zone=(raw.get("Placement") or {}).get("AvailabilityZone"),
        instance_type=raw.get("InstanceType"),
        launch_time=launch.timestamp() if isinstance(launch, datetime) else None,
        tags={str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags") or []})


def describe_instances(ec2: Any, *, ids: list[str] | None = None,
                       tags: dict[str, str] | None = None) -> list[Instance]:
    """Instances by id, or every instance carrying all ``tags`` (not yet terminated). A read."""
    kwargs: dict[str, Any] = {}
    if ids is not None:
        if not ids:
            return []
        kwargs["InstanceIds"] = ids
    if tags:
        kwargs["Filters"] = [{"Name": f"tag:{k}", "Values": ["*" if v == "*" else v]} for k, v in tags.items()]
    out: list[Instance] = []
    with refused_loudly("ec2:DescribeInstances", destructive=False):
        for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
            for reservation in page.get("Reservations") or []:
                out += [_instance(raw) for raw in reservation.get("Instances") or []]
    if tags:  # the filter is the server's; the check is ours (never trust a filter to narrow)
        out = [i for i in out if i.matches(tags) and i.state != "terminated"]
    return sorted(out, key=lambda i: (i.launch_time or 0.0, i.id))


# -- Auto Scaling groups (EKS managed node groups are ASGs) ----------------------------------
@dataclass(frozen=True)
class ScalingGroup:
    name: str
    arn: str
    desired: int
    min_size: int
    max_size: int
    instances: tuple[str, ...]
    zones: tuple[str, ...]
    tags: dict[str, str] = field(default_factory=dict)

def describe_groups(autoscaling: Any, names: list[str]) -> list[ScalingGroup]:
    """The named Auto Scaling groups (a read)."""
    if not names:
        return []
    out: list[ScalingGroup] = []
    with refused_loudly("autoscaling:DescribeAutoScalingGroups", destructive=False):
        for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate(
                AutoScalingGroupNames=sorted(set(names))):
            for g in page.get("AutoScalingGroups") or []:
                out.append(ScalingGroup(
                    name=g["AutoScalingGroupName"], arn=g.get("AutoScalingGroupARN", ""),
                    desired=int(g.get("DesiredCapacity", 0)), min_size=int(g.get("MinSize", 0)),
                    max_size=int(g.get("MaxSize", 0)),
                    instances=tuple(i["InstanceId"] for i in g.get("Instances") or []),
                    zones=tuple(g.get("AvailabilityZones") or []),
                    tags={t["Key"]: t.get("Value", "") for t in g.get("Tags") or []}))
    return out


def scaling_activities(autoscaling: Any, group: str, *, limit: int = 20) -> list[dict[str, Any]]:
    """The group's newest scaling activities (launches, terminations, failures). A read."""
    with refused_loudly("autoscaling:DescribeScalingActivities", destructive=False):
        answer = autoscaling.describe_scaling_activities(AutoScalingGroupName=group, MaxRecords=limit)
    return list(answer.get("Activities") or [])


# -- account, alarms ------------------------------------------------------------------------
def account_id(sts: Any) -> str:
    with refused_loudly("sts:GetCallerIdentity", destructive=False):
        return str(sts.get_caller_identity()["Account"])


def alarm_state(cloudwatch: Any, name: str) -> str:
    """OK, ALARM or INSUFFICIENT_DATA; PlatformError when there is no such alarm."""
    with refused_loudly("cloudwatch:DescribeAlarms", destructive=False):
        alarms = cloudwatch.describe_alarms(AlarmNames=[name]).get("MetricAlarms") or []
    if not alarms:
        raise PlatformError(f"no CloudWatch alarm named {name!r} in this region: check --stop-alarm and --region")
    return str(alarms[0]["StateValue"])


def alarm_arn(cloudwatch: Any, name: str) -> str:
    with refused_loudly("cloudwatch:DescribeAlarms", destructive=False):
        alarms = cloudwatch.describe_alarms(AlarmNames=[name]).get("MetricAlarms") or []
    if not alarms:
        raise PlatformError(f"no CloudWatch alarm named {name!r} in this region: check --stop-alarm and --region")
    return str(alarms[0]["AlarmArn"])
