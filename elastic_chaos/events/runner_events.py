"""The toolkit itself: ChaosRun's phases, the platforms starting and stopping things, a
run's watchdog, the watchers."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.events.payload import Nothing, Payload
from elastic_chaos.events.types import Source, event_type


@dataclass(frozen=True, kw_only=True)
class Phase(Payload):
    """ChaosRun entered ``phase``; what the phase is about rides beside it."""

    phase: str
    nodes: str | None = None
    """starting: the job's node range."""
    target_step: int | None = None
    """steady_state: the step it waits for."""
    step: int | None = None
    """steady: the step the job had reached when it was found steady (the fault follows at once)."""
    waited_s: float | None = None
    why: str | None = None
    """steady: how long the check waited after the step was reached, and why (None: only to read the
    logs past the step)."""
    fault: str | None = None
    """inject, recovering: the fault's name."""
    target: str | None = None
    world_size: int | None = None
    """awaiting_world_size: the size it waits for."""
    until: float | None = None
    """slowed: when the slowdown ends (epoch seconds; older timelines)."""
    for_s: float | None = None
    """slowed, degraded: how long the fault holds from now."""
    interrupted: bool | None = None
    """finished (a watch): it ended on Ctrl-C."""
    run_id: str | None = None
    etcd: str | None = None
    mtbf_s: float | None = None
    duration_s: float | None = None
    seed: int | None = None
    """repeated: the Poisson process' mean time between faults, length and seed."""
    trace: Mapping[str, Any] | None = None
    """replay: where the trace came from (a file, or a generator and its parameters)."""
    compress: float | None = None
    by: str | None = None
    preemptions: int | None = None
    span_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class JobStarted(Payload):
    run_id: str | None = None
    platform: str | None = None
    spec: Mapping[str, Any] | None = None
    """The JobSpec as JSON (None: a watched job the toolkit did not start)."""
    etcd: str | None = None
    passive: bool | None = None
    """A watch: the job was not started by the toolkit."""


@dataclass(frozen=True, kw_only=True)
class JobStopped(Payload):
    run_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class EtcdStarted(Payload):
    endpoint: str | None = None
    pid: int | None = None
    version: str | None = None


@dataclass(frozen=True, kw_only=True)
class Isolation(Payload):
    network: str | None = None
    cgroups: str | None = None
    exposed: tuple[str, ...] = ()
    """Listeners torch binds to every interface (a note for the report)."""


@dataclass(frozen=True, kw_only=True)
class GpuPlacement(Payload):
    """How the local platform gave nodes GPUs (elastic_chaos.platforms.local.gpus)."""

    mode: str | None = None
    """none / exclusive / shared."""
    slices: tuple[tuple[str, ...], ...] = ()
    own_host_ids: bool | None = None
    note: str | None = None
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Threads(Payload):
    """How the local platform fitted the job's threads to this machine's cores
    (elastic_chaos.platforms.local.threads): torch runs a thread per core in every worker."""

    cores: int | None = None
    workers: int | None = None
    """Worker processes of the whole job on this machine (nodes x processes per node)."""
    threads: int | None = None
    """Threads each worker runs with on every node."""
    env: Mapping[str, str] = field(default_factory=dict)
    """What the platform set on every node (OMP_NUM_THREADS); empty: the user's value was kept."""
    oversubscribed: bool | None = None
    """Whether workers x threads still outnumber the cores."""
    advice: str | None = None
    """In words, for the report."""


@dataclass(frozen=True, kw_only=True)
class ManifestsApplied(Payload):
    kinds: tuple[str, ...] = ()
    """The Kubernetes object kinds created."""
    namespace: str | None = None
    job_kind: str | None = None


@dataclass(frozen=True, kw_only=True)
class StoreStopped(Payload):
    action: str | None = None
    how: str | None = None


@dataclass(frozen=True, kw_only=True)
class Reaped(Payload):
    """What a dead run left, stopped (elastic_chaos.host.registry.Reaped)."""

    run_id: str | None = None
    runner_pid: int | None = None
    report_dir: str | None = None
    by: str | None = None
    killed: Mapping[str, str] = field(default_factory=dict)
    """PID -> what it was."""
    removed: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    at: float | None = None


@dataclass(frozen=True, kw_only=True)
class Leftovers(Payload):
    killed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class WatcherDied(Payload):
    watcher: str
    error: str


@dataclass(frozen=True, kw_only=True)
class DiskFull(Payload):
    """A disk the run writes its evidence to ran out of room (elastic_chaos.runner.disk)."""

    path: str
    free_bytes: int | None = None
    why: str | None = None
    at: float | None = None
    """When the run saw it (the event is written later, once the run has made room)."""


@dataclass(frozen=True, kw_only=True)
class ClockOffset(Payload):
    """A node's clock is off the runner's (elastic_chaos.watchers.clocks): its stamped log times are moved by
    ``offset_s`` (its clock minus the runner's), measured between ``lower_s`` and ``upper_s``."""

    offset_s: float
    lower_s: float | None = None
    upper_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class CostBasisGiven(Payload):
    """What the job's GPUs cost in production, as the run was given it (elastic_chaos.analysis.cost): GPUs
    per node and the price of a GPU-hour resolved (from an instance type's bundled price where named),
    with where the price comes from."""

    gpus_per_node: int | None = None
    gpu_hour_price: float | None = None
    """US dollars per GPU-hour (None: none given)."""
    price_source: str | None = None
    instance_type: str | None = None
    mtbf_hours: float | None = None
    """Mean hours between interruptions in production (None: none given)."""


class RunnerEv:
    """The toolkit itself: ChaosRun and the platforms."""

    PHASE = event_type(Source.RUNNER, "phase", Phase)
    """ChaosRun entered ``phase`` (starting, steady_state, inject, recovering, ..., teardown, finished)."""
    JOB_STARTED = event_type(Source.RUNNER, "job_started", JobStarted)
    """The platform started the job (``run_id``, ``platform``, ``spec``)."""
    JOB_STOPPED = event_type(Source.RUNNER, "job_stopped", JobStopped)
    """The platform stopped the job."""
    ETCD_STARTED = event_type(Source.RUNNER, "etcd_started", EtcdStarted)
    """The local platform's etcd is up (``endpoint``, ``version``, ``pid``)."""
    ISOLATION = event_type(Source.RUNNER, "isolation", Isolation)
    """How the local platform isolates nodes (``network``, cgroups)."""
    GPU_PLACEMENT = event_type(Source.RUNNER, "gpu_placement", GpuPlacement)
    """How the local platform gave nodes GPUs (``mode``: none / exclusive / shared, ``slices``,
    ``own_host_ids``, ``note``; elastic_chaos.platforms.local.gpus)."""
    THREADS = event_type(Source.RUNNER, "threads", Threads)
    """The local platform's nodes share this machine's cores and torch's default threads would
    oversubscribe them (or the user's OMP_NUM_THREADS does): what it set on every node
    (``env``), ``cores``, ``workers``, ``threads`` each, whether they still ``oversubscribed``,
    and ``advice`` in words (the report's remarks say it)."""
    MANIFESTS_APPLIED = event_type(Source.RUNNER, "manifests_applied", ManifestsApplied)
    """Kubernetes: the job's objects were created (``kinds``, ``namespace``, ``job_kind``)."""
    STORE_STOPPED = event_type(Source.RUNNER, "store_stopped", StoreStopped)
    """The rendezvous store was stopped by a fault (``how``)."""
    STORE_STARTED = event_type(Source.RUNNER, "store_started", Nothing)
    """The rendezvous store is back."""
    REAPED = event_type(Source.RUNNER, "reaped", Reaped)
    """The local platform stopped what a runner that is gone left running (``run_id``, ``by``: its
    watchdog or a later run, ``killed``: PID -> what, ``removed``, ``errors``); in the dead run's
    timeline when its watchdog did it, in the new run's when a later run did."""
    LEFTOVERS = event_type(Source.RUNNER, "leftovers", Leftovers)
    """The local platform's own stop missed processes of the run and killed them afterwards
    (``killed``: PID -> tag); a bug worth a look, not a failure of the job."""
    DISK_FULL = event_type(Source.RUNNER, "disk_full", DiskFull)
    """A disk the run writes to ran out of room (``path``, ``free_bytes``, ``why``, ``at``): the run
    stopped there, and says so (``elastic-chaos report`` names it)."""
    CLOCK_OFFSET = event_type(Source.RUNNER, "clock_offset", ClockOffset)
    """A node's clock differs from the runner's (``offset_s``): its stamped log times are placed on the
    runner's clock from here on (0: no longer corrected)."""
    COST_BASIS = event_type(Source.RUNNER, "cost_basis", CostBasisGiven)
    """What the job's GPUs cost in production (``gpus_per_node``, ``gpu_hour_price``, ``price_source``,
    ``mtbf_hours``): the report turns each interruption into GPU-hours and money from it."""
    WATCHER_DIED = event_type(Source.RUNNER, "watcher_died", WatcherDied)
    """A watcher's thread ended with an error (``watcher``, ``error``): what it watched is
    unobserved from here on, and the run fails (watchers/api.py)."""
