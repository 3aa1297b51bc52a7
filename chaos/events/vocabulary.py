"""The closed set of event types a timeline holds: who says what, and what it means.

An event's ``source`` and ``kind`` stay plain strings on the wire (timeline.jsonl
is read back by reports, audits and older tools); in code they are compared as
an ``EventType`` from one of the namespaces below (``e.type == ProgressEv.STEP``),
so a typo is a NameError instead of a silently empty filter. A timeline may hold
types not listed here (a newer toolkit's, a script's own ``trainer.progress``
events): they read back as ``EventType`` values like any other and match none
of these constants.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Source(str, enum.Enum):
    """Who observed an event."""

    FAULT = "fault"
    """A fault: planned, injected, reverted (faults, ChaosRun), or a loss a watch observed."""
    RENDEZVOUS = "rendezvous"
    """The rendezvous state in etcd (watchers/rendezvous.py)."""
    AGENT = "agent"
    """torchrun's own log lines (watchers/logs.py)."""
    PROGRESS = "progress"
    """The training script: trainer.progress lines, a script's regex, worker tracebacks."""
    CHECKPOINT = "checkpoint"
    """Checkpoint writes and restores: trainer.progress lines, a script's regex, the file watcher."""
    NODE = "node"
    """A node's (pod's, instance's) life as the platform sees it."""
    RUNNER = "runner"
    """The toolkit itself: ChaosRun phases, the platform starting and stopping things."""


@dataclass(frozen=True)
class EventType:
    """One (source, kind). Plain strings, so a type read back from JSON hashes and
    compares equal to the constant (a ``Source`` member is stored as its value)."""

    source: str
    kind: str

    def __post_init__(self) -> None:
        if isinstance(self.source, Source):
            object.__setattr__(self, "source", self.source.value)

    def __str__(self) -> str:
        return f"{self.source}/{self.kind}"


def _t(source: Source, kind: str) -> EventType:
    return EventType(source.value, kind)


class FaultEv:
    """Faults (faults/api.py, ChaosRun) and losses observed by ``elastic-chaos watch``."""

    PLANNED = _t(Source.FAULT, "planned")
    """A fault resolved its target (``actions``: what it is about to do); emitted by Fault.inject."""
    ARMED = _t(Source.FAULT, "armed")
    """A fault waits for its trigger (ChaosRun.arm)."""
    TRIGGERED = _t(Source.FAULT, "triggered")
    """An armed fault's trigger matched (``by``: the matching event); ChaosRun's armed fault."""
    INJECTED = _t(Source.FAULT, "injected")
    """The fault hit, timed at the instant it hit (Fault.inject). Every recovery is measured from one."""
    REVERTED = _t(Source.FAULT, "reverted")
    """A fault was undone (heal, thaw, store restarted); Fault.revert."""
    SKIPPED = _t(Source.FAULT, "skipped")
    """A repeated fault was not fired: too few nodes alive (ChaosRun.repeat)."""
    REPLAYED = _t(Source.FAULT, "replayed")
    """A replayed trace's preemption came due (``index``, ``offset_s`` in the trace, ``due_at``,
    ``trace_node``, ``trace_group``, ``slot``, ``outcome``: injected, with ``injected_at`` and
    ``late_s``, or skipped, with ``reason``); hypotheses/replay.py."""
    FIS_STATE = _t(Source.FAULT, "fis_state")
    """An AWS FIS experiment changed state (faults/aws.py)."""
    OBSERVED = _t(Source.FAULT, "observed")
    """A watch saw a participant leave the rendezvous (``fault: node-lost``), timed at its last
    heartbeat; the watch's stand-in for ``injected`` (runner/watch.py LossDetector)."""


class RdzvEv:
    """The rendezvous key in etcd, long-polled by watchers/rendezvous.py."""

    STATE = _t(Source.RENDEZVOUS, "state")
    """The rendezvous state changed (round, participants, wait list, heartbeats; not every heartbeat)."""
    ROUND_COMPLETE = _t(Source.RENDEZVOUS, "round_complete")
    """A round became complete, once per round."""
    DELETED = _t(Source.RENDEZVOUS, "deleted")
    """The rendezvous key was deleted or expired."""
    STORE_UNREACHABLE = _t(Source.RENDEZVOUS, "store_unreachable")
    """etcd stopped answering (``error``)."""
    STORE_REACHABLE = _t(Source.RENDEZVOUS, "store_reachable")
    """etcd answers again after being unreachable."""
    REFUSED = _t(Source.RENDEZVOUS, "refused")
    """The state named a class the allow-list unpickler refuses (``reason``)."""
    UNDECODABLE = _t(Source.RENDEZVOUS, "undecodable")
    """The state could not be decoded (``reason``)."""


class AgentEv:
    """torchrun's agent, from its glog lines and tracebacks in a node log (watchers/logs.py)."""

    WORKER_FAILED = _t(Source.AGENT, "worker_failed")
    """A worker process of this node failed (``exitcode``, ``local_rank``, ``pid``)."""
    WORKER_GROUP_FAILED = _t(Source.AGENT, "worker_group_failed")
    """The node's worker group failed; one restart spent (``attempts_left``, ``max_restarts``)."""
    MEMBERSHIP_CHANGE = _t(Source.AGENT, "membership_change")
    """The agent saw new nodes waiting (``new_nodes``) and restarts its workers to admit them."""
    RENDEZVOUS_STARTED = _t(Source.AGENT, "rendezvous_started")
    """The agent starts a rendezvous round."""
    RENDEZVOUS_COMPLETE = _t(Source.AGENT, "rendezvous_complete")
    """The agent's round completed (``group_rank``, ``group_world_size``, ``restart_count``)."""
    WORKERS_STARTING = _t(Source.AGENT, "workers_starting")
    """The agent starts its worker group."""
    WORKERS_STOPPING = _t(Source.AGENT, "workers_stopping")
    """The agent stops its worker group."""
    WORKERS_FINISHED = _t(Source.AGENT, "workers_finished")
    """The worker group finished successfully."""
    SIGNAL_RECEIVED = _t(Source.AGENT, "signal_received")
    """The agent received a death signal (``signal``)."""
    RENDEZVOUS_CLOSED = _t(Source.AGENT, "rendezvous_closed")
    """The rendezvous is closed: the agent cannot join."""
    RENDEZVOUS_TIMEOUT = _t(Source.AGENT, "rendezvous_timeout")
    """The agent's rendezvous timed out."""
    RENDEZVOUS_ERROR = _t(Source.AGENT, "rendezvous_error")
    """A Rendezvous*Error in a traceback (``error``): e.g. the store is gone."""
    AGENT_GAVE_UP = _t(Source.AGENT, "agent_gave_up")
    """A ChildFailedError: the agent spent its restarts and exits."""
    CLOSING_WORKER = _t(Source.AGENT, "closing_worker")
    """The agent sends a live worker its closing signal (``pid``, ``signal``): its shutdown wait
    starts (torch 2.13: 30 s when it restarts workers)."""
    WORKER_KILL_FORCED = _t(Source.AGENT, "worker_kill_forced")
    """A worker outlived the agent's shutdown wait after its closing signal (it ignored SIGTERM,
    e.g. blocked in a collective) and is killed (``pid``, ``signal``, ``kill_signal``)."""


class ProgressEv:
    """The training script: trainer.progress lines (watchers/logs.py), a script's
    --progress-regex (watchers/script_lines.py), worker tracebacks."""

    START = _t(Source.PROGRESS, "start")
    """A worker process is up, before process-group init (report_start): marks the restart phase."""
    STEP = _t(Source.PROGRESS, "step")
    """A rank completed a step (``step``, ``rank``, ``world_size``, ``pid``; ``samples`` for the
    exactly-once account; ``via: regex`` from a script's own line)."""
    FINISHED = _t(Source.PROGRESS, "finished")
    """Training completed (``step``)."""
    EMERGENCY_EXIT = _t(Source.PROGRESS, "emergency_exit")
    """A worker stopped on a signal after saving (``step``, ``signal``)."""
    NOTICE = _t(Source.PROGRESS, "notice")
    """The script saw a spot/rebalance notice (``kind``, ``detail``)."""
    WORKER_ERROR = _t(Source.PROGRESS, "worker_error")
    """A worker's collective failed: its traceback line, or its NCCL watchdog's line (``via: nccl``,
    stamped with the line's own time) (``error``, ``message``, ``cause``: timeout / connection_closed /
    watchdog_stuck / other, or unknown where the line does not say)."""
    NCCL_DUMP = _t(Source.PROGRESS, "nccl_dump")
    """A worker's NCCL watchdog signalled a debug dump after a collective failed; it then waits up to
    TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC before it takes the process down (``rank``, ``message``)."""
    NCCL_TEARDOWN = _t(Source.PROGRESS, "nccl_teardown")
    """A worker's NCCL watchdog takes the process down (SIGABRT follows) (``rank``, ``message``)."""
    UNPARSED = _t(Source.PROGRESS, "unparsed")
    """A --progress-regex match that could not be read as a step (``why``)."""


class CheckpointEv:
    """Checkpoints: trainer.progress ``checkpoint_*`` lines, a script's --resume-regex,
    the checkpoint file watcher (watchers/checkpoints.py, ``via: file``)."""

    STARTED = _t(Source.CHECKPOINT, "started")
    """A checkpoint of ``step`` is being written (``reason``: periodic, sigterm, ...)."""
    SAVED = _t(Source.CHECKPOINT, "saved")
    """A checkpoint of ``step`` is durable at ``path``."""
    LOADED = _t(Source.CHECKPOINT, "loaded")
    """Training resumed from ``step`` (0 and no path: a fresh start)."""
    CORRUPT = _t(Source.CHECKPOINT, "corrupt")
    """A checkpoint file could not be loaded and was skipped (``path``, ``reason``)."""
    REMOVED = _t(Source.CHECKPOINT, "removed")
    """The trainer removed a checkpoint file (stale or corrupt; ``path``, ``reason``)."""


class NodeEv:
    """A node of the job as its platform sees it (platforms/api.py, local, kubernetes, aws;
    the watch's LossDetector for ``lost``)."""

    STARTED = _t(Source.NODE, "started")
    """A node (agent, pod) started; ``replaces`` names the node it stands in for."""
    LOST = _t(Source.NODE, "lost")
    """A node was taken away (``action``: how; ``observed`` from a watch)."""
    EXITED = _t(Source.NODE, "exited")
    """A node's agent ended on its own (``exit_code``)."""
    PROVISIONING = _t(Source.NODE, "provisioning")
    """A replacement for ``replaces`` comes after ``delay_s``."""
    PROVISIONED = _t(Source.NODE, "provisioned")
    """Kubernetes: the held-back replacement for ``replaces`` is let through (the job scaled back up)."""
    NOTICE = _t(Source.NODE, "notice")
    """A spot/rebalance notice was posted for the node (``notice``, ``terminate_at``)."""
    PARTITIONED = _t(Source.NODE, "partitioned")
    """The node's network was cut off."""
    HEALED = _t(Source.NODE, "healed")
    """The node's network partition was healed."""
    FROZEN = _t(Source.NODE, "frozen")
    """Every process of the node was frozen."""
    THAWED = _t(Source.NODE, "thawed")
    """The node's processes were thawed."""
    WORKER_KILLED = _t(Source.NODE, "worker_killed")
    """One worker process of the node was killed (``local_rank``)."""
    SLOWED = _t(Source.NODE, "slowed")
    """The node runs at 1/``factor`` of its speed (a duty cycle of ``period_s``; ``how``)."""
    RESTORED = _t(Source.NODE, "restored")
    """The node runs at full speed again (``cycles``: stop/continue cycles it went through)."""
    WORKER_HUNG = _t(Source.NODE, "worker_hung")
    """One worker process of the node was stopped where it was (``local_rank``, ``pids``)."""
    WORKER_RESUMED = _t(Source.NODE, "worker_resumed")
    """A hung worker was continued (``action``: sigcont, or nothing when it is gone)."""
    SCHEDULED = _t(Source.NODE, "scheduled")
    """Kubernetes: the pod was placed on ``machine``."""
    RUNNING = _t(Source.NODE, "running")
    """Kubernetes: the pod is Running."""
    TERMINATING = _t(Source.NODE, "terminating")
    """Kubernetes: the pod is being deleted (``grace_s``)."""
    RESTARTED = _t(Source.NODE, "restarted")
    """Kubernetes: the pod's container restarted (``restart_count``, ``exit_code``)."""
    MACHINE_ADDED = _t(Source.NODE, "machine_added")
    """Kubernetes: a Node object appeared (``machine``, ``ready``)."""
    MACHINE_DELETED = _t(Source.NODE, "machine_deleted")
    """Kubernetes: a Node object was deleted."""
    MACHINE_READY = _t(Source.NODE, "machine_ready")
    """Kubernetes: a Node became Ready."""
    MACHINE_NOT_READY = _t(Source.NODE, "machine_not_ready")
    """Kubernetes: a Node stopped being Ready."""
    MACHINE_CORDONED = _t(Source.NODE, "machine_cordoned")
    """Kubernetes: a Node was marked unschedulable."""
    MACHINE_UNCORDONED = _t(Source.NODE, "machine_uncordoned")
    """Kubernetes: a Node was marked schedulable again."""
    INSTANCE_LAUNCHED = _t(Source.NODE, "instance_launched")
    """AWS: the Auto Scaling group launched a new instance (watchers/replacement.py)."""
    INSTANCE_STATE = _t(Source.NODE, "instance_state")
    """AWS: a target's or new instance's EC2 state changed (``state``, ``previous``, ``new``)."""
    ASG_ACTIVITY = _t(Source.NODE, "asg_activity")
    """AWS: an Auto Scaling activity (``status``, ``description``, ``cause``)."""
    INSTANCE_JOINED = _t(Source.NODE, "instance_joined")
    """AWS: a new instance is a Ready Kubernetes node (``instance``, ``machine``)."""


class RunnerEv:
    """The toolkit itself: ChaosRun and the platforms."""

    PHASE = _t(Source.RUNNER, "phase")
    """ChaosRun entered ``phase`` (starting, steady_state, inject, recovering, ..., teardown, finished)."""
    JOB_STARTED = _t(Source.RUNNER, "job_started")
    """The platform started the job (``run_id``, ``platform``, ``spec``)."""
    JOB_STOPPED = _t(Source.RUNNER, "job_stopped")
    """The platform stopped the job."""
    ETCD_STARTED = _t(Source.RUNNER, "etcd_started")
    """The local platform's etcd is up (``endpoint``, ``version``, ``pid``)."""
    ISOLATION = _t(Source.RUNNER, "isolation")
    """How the local platform isolates nodes (``network``, cgroups)."""
    GPU_PLACEMENT = _t(Source.RUNNER, "gpu_placement")
    """How the local platform gave nodes GPUs (``mode``: none / exclusive / shared, ``slices``,
    ``own_host_ids``, ``note``; chaos.platforms.local.gpus)."""
    MANIFESTS_APPLIED = _t(Source.RUNNER, "manifests_applied")
    """Kubernetes: the job's objects were created (``kinds``, ``namespace``, ``job_kind``)."""
    STORE_STOPPED = _t(Source.RUNNER, "store_stopped")
    """The rendezvous store was stopped by a fault (``how``)."""
    STORE_STARTED = _t(Source.RUNNER, "store_started")
    """The rendezvous store is back."""
    REAPED = _t(Source.RUNNER, "reaped")
    """The local platform stopped what a runner that is gone left running (``run_id``, ``by``: its
    watchdog or a later run, ``killed``: PID -> what, ``removed``, ``errors``); in the dead run's
    timeline when its watchdog did it, in the new run's when a later run did."""
    LEFTOVERS = _t(Source.RUNNER, "leftovers")
    """The local platform's own stop missed processes of the run and killed them afterwards
    (``killed``: PID -> tag); a bug worth a look, not a failure of the job."""
    WATCHER_DIED = _t(Source.RUNNER, "watcher_died")
    """A watcher's thread ended with an error (``watcher``, ``error``): what it watched is
    unobserved from here on, and the run fails (watchers/api.py)."""


NAMESPACES: tuple[type, ...] = (FaultEv, RdzvEv, AgentEv, ProgressEv, CheckpointEv, NodeEv, RunnerEv)

ALL_TYPES: frozenset[EventType] = frozenset(
    v for ns in NAMESPACES for v in vars(ns).values() if isinstance(v, EventType))
"""Every declared event type."""
