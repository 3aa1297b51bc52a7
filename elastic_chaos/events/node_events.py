"""A node of the job as its platform sees it (platforms/api.py, local, kubernetes, aws; the
watch's LossDetector for ``lost``)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from elastic_chaos.events.payload import Nothing, Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Started(Payload):
    agent_pid: int | None = None
    replaces: str | None = None
    """The node it stands in for (a replacement)."""
    address: str | None = None
    uid: str | None = None
    """Kubernetes: the pod's uid."""


@dataclass(frozen=True, kw_only=True)
class Acted(Payload):
    """What a platform did to a node: how, and to which processes. A platform's own detail
    (a pod's grace period, the pods of a machine) rides in ``extra``."""

    action: str | None = None
    pids: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Lost(Acted):
    machine: str | None = None
    how: str | None = None
    grace_s: float | None = None
    """A graceful loss: the seconds from SIGTERM to SIGKILL of whatever was left."""
    exited_within_grace_s: float | None = None
    """A graceful loss whose processes all exited on SIGTERM: how soon (None: SIGKILL was needed)."""
    id: str | None = None
    """A watch's loss: the participant's rendezvous id."""
    last_heartbeat: float | None = None
    noticed_at: float | None = None


def how_lost(lost: Lost) -> str:
    """What a node's loss did to its processes, in words (``pids``: the processes that had to be killed)."""
    n = len(lost.pids)
    killed = f"{n} process" + ("" if n == 1 else "es")
    if lost.action == "sigterm":
        within = lost.exited_within_grace_s
        return "SIGTERM; its processes exited" + (f" within {within:.1f} s" if within is not None else "")
    if lost.action == "sigterm-then-sigkill":
        grace = f" after the {lost.grace_s:g} s grace" if lost.grace_s is not None else ""
        return f"SIGTERM, then SIGKILL of {killed} still running{grace}"
    if lost.action == "sigkill-all":
        return f"SIGKILL of {killed}"
    return f"{lost.action or 'lost'}" + (f", {killed} killed" if n else "")


@dataclass(frozen=True, kw_only=True)
class Exited(Payload):
    exit_code: int | None = None
    phase: str | None = None
    """Kubernetes: the pod's phase (Succeeded, Failed)."""
    restart_count: int | None = None


@dataclass(frozen=True, kw_only=True)
class Provisioning(Payload):
    replaces: str | None = None
    delay_s: float | None = None
    machine: str | None = None


@dataclass(frozen=True, kw_only=True)
class Notice(Payload):
    notice: str | None = None
    """``rebalance`` or ``interruption``."""
    terminate_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class WorkerActed(Acted):
    local_rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class Slowed(Acted):
    factor: float | None = None
    period_s: float | None = None
    how: str | None = None
    run_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Restored(Acted):
    cycles: int | None = None


@dataclass(frozen=True, kw_only=True)
class LinkDegraded(Acted):
    """The link between a node and ``peers`` degraded (elastic_chaos.faults.network)."""

    link: str | None = None
    peers: tuple[str, ...] = ()
    loss: float | None = None
    rate_kbit: int | None = None
    down_s: float | None = None
    up_s: float | None = None
    delay_ms: float | None = None
    jitter_ms: float | None = None
    to_store: bool | None = None
    """The node's link to the rendezvous store (not to ``peers``)."""


@dataclass(frozen=True, kw_only=True)
class OnMachine(Payload):
    """Kubernetes: a pod or a Node object, by its machine."""

    machine: str | None = None
    ready: bool | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Terminating(Payload):
    grace_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Restarted(Payload):
    restart_count: int | None = None
    exit_code: int | None = None


@dataclass(frozen=True, kw_only=True)
class Instance(Payload):
    """AWS: an EC2 instance of the node group (watchers/replacement.py)."""

    instance: str | None = None
    group: str | None = None
    machine: str | None = None
    state: str | None = None
    previous: str | None = None
    new: bool | None = None


@dataclass(frozen=True, kw_only=True)
class AsgActivity(Payload):
    group: str | None = None
    status: str | None = None
    description: str | None = None
    cause: str | None = None


@dataclass(frozen=True, kw_only=True)
class DiskLost(Payload):
    """A node's own disk went with it (JobSpec.node_local_workdir): what it held."""

    path: str | None = None
    files: tuple[str, ...] = ()
    """Its files, relative to it (the first few)."""
    count: int | None = None
    size: int | None = None
    """Bytes."""


@dataclass(frozen=True, kw_only=True)
class StorageFault(Payload):
    """The job's checkpoint volume misbehaves for a node (or every node: the event has no node)."""

    fault: str | None = None
    """The fault kind (slow-storage, storage-hang, storage-full, storage-errors, storage-readonly,
    kill-at-save-point)."""
    rule: str | None = None
    """The storage layer's name for the rule (what ``storage_restored`` names)."""
    detail: str | None = None
    """The rule in words: ``latency delay_s=0.5, ops=[fsync, write]``."""
    mountpoint: str | None = None


@dataclass(frozen=True, kw_only=True)
class StorageRestored(Payload):
    fault: str | None = None
    rule: str | None = None
    action: str | None = None
    """cleared, or already-over (a one-shot rule that fired, an expired hang)."""


class NodeEv:
    """A node of the job as its platform sees it (platforms/api.py, local, kubernetes, aws;
    the watch's LossDetector for ``lost``)."""

    STARTED = event_type(Source.NODE, "started", Started)
    """A node (agent, pod) started; ``replaces`` names the node it stands in for."""
    LOST = event_type(Source.NODE, "lost", Lost)
    """A node was taken away (``action``: how; ``observed`` from a watch)."""
    DISK_LOST = event_type(Source.NODE, "disk_lost", DiskLost)
    """A lost node's own disk went with it (JobSpec.node_local_workdir; ``path``, ``count`` files,
    ``size`` bytes, the first few ``files``): its local checkpoints are gone."""
    EXITED = event_type(Source.NODE, "exited", Exited)
    """A node's agent ended on its own (``exit_code``)."""
    PROVISIONING = event_type(Source.NODE, "provisioning", Provisioning)
    """A replacement for ``replaces`` comes after ``delay_s``."""
    PROVISIONED = event_type(Source.NODE, "provisioned", Provisioning)
    """Kubernetes: the held-back replacement for ``replaces`` is let through (the job scaled back up)."""
    NOTICE = event_type(Source.NODE, "notice", Notice)
    """A spot/rebalance notice was posted for the node (``notice``, ``terminate_at``)."""
    PARTITIONED = event_type(Source.NODE, "partitioned", Nothing)
    """The node's network was cut off."""
    HEALED = event_type(Source.NODE, "healed", Nothing)
    """The node's network partition was healed."""
    FROZEN = event_type(Source.NODE, "frozen", Acted)
    """Every process of the node was frozen."""
    THAWED = event_type(Source.NODE, "thawed", Nothing)
    """The node's processes were thawed."""
    WORKER_KILLED = event_type(Source.NODE, "worker_killed", WorkerActed)
    """One worker process of the node was killed (``local_rank``)."""
    SLOWED = event_type(Source.NODE, "slowed", Slowed)
    """The node runs at 1/``factor`` of its speed (a duty cycle of ``period_s``; ``how``)."""
    RESTORED = event_type(Source.NODE, "restored", Restored)
    """The node runs at full speed again (``cycles``: stop/continue cycles it went through)."""
    LINK_DEGRADED = event_type(Source.NODE, "link_degraded", LinkDegraded)
    """The link between the node and ``peers`` loses, is capped or flaps (``link`` names it)."""
    LINK_RESTORED = event_type(Source.NODE, "link_restored", Acted)
    """The degraded link is whole again: every rule and qdisc it had removed."""
    WORKER_HUNG = event_type(Source.NODE, "worker_hung", WorkerActed)
    """One worker process of the node was stopped where it was (``local_rank``, ``pids``)."""
    WORKER_RESUMED = event_type(Source.NODE, "worker_resumed", Acted)
    """A hung worker was continued (``action``: sigcont, or nothing when it is gone)."""
    STORAGE_FAULT = event_type(Source.NODE, "storage_fault", StorageFault)
    """The checkpoint volume misbehaves for the node (no node: every node) by ``rule`` (``detail``)."""
    STORAGE_RESTORED = event_type(Source.NODE, "storage_restored", StorageRestored)
    """The checkpoint volume's fault ``rule`` was cleared: it behaves again."""
    SCHEDULED = event_type(Source.NODE, "scheduled", OnMachine)
    """Kubernetes: the pod was placed on ``machine``."""
    RUNNING = event_type(Source.NODE, "running", OnMachine)
    """Kubernetes: the pod is Running."""
    TERMINATING = event_type(Source.NODE, "terminating", Terminating)
    """Kubernetes: the pod is being deleted (``grace_s``)."""
    RESTARTED = event_type(Source.NODE, "restarted", Restarted)
    """Kubernetes: the pod's container restarted (``restart_count``, ``exit_code``)."""
    MACHINE_ADDED = event_type(Source.NODE, "machine_added", OnMachine)
    """Kubernetes: a Node object appeared (``machine``, ``ready``)."""
    MACHINE_DELETED = event_type(Source.NODE, "machine_deleted", OnMachine)
    """Kubernetes: a Node object was deleted."""
    MACHINE_READY = event_type(Source.NODE, "machine_ready", OnMachine)
    """Kubernetes: a Node became Ready."""
    MACHINE_NOT_READY = event_type(Source.NODE, "machine_not_ready", OnMachine)
    """Kubernetes: a Node stopped being Ready."""
    MACHINE_CORDONED = event_type(Source.NODE, "machine_cordoned", OnMachine)
    """Kubernetes: a Node was marked unschedulable."""
    MACHINE_UNCORDONED = event_type(Source.NODE, "machine_uncordoned", OnMachine)
    """Kubernetes: a Node was marked schedulable again."""
    INSTANCE_LAUNCHED = event_type(Source.NODE, "instance_launched", Instance)
    """AWS: the Auto Scaling group launched a new instance (watchers/replacement.py)."""
    INSTANCE_STATE = event_type(Source.NODE, "instance_state", Instance)
    """AWS: a target's or new instance's EC2 state changed (``state``, ``previous``, ``new``)."""
    ASG_ACTIVITY = event_type(Source.NODE, "asg_activity", AsgActivity)
    """AWS: an Auto Scaling activity (``status``, ``description``, ``cause``)."""
    INSTANCE_JOINED = event_type(Source.NODE, "instance_joined", Instance)
    """AWS: a new instance is a Ready Kubernetes node (``instance``, ``machine``)."""
