"""Threads per worker when the local platform's nodes share this machine's cores.

torch starts one intra-op (OpenMP) thread per core in every worker process, and
torchrun sets ``OMP_NUM_THREADS=1`` only when a node runs more than one process.
A local job's nodes all run on this machine, so two single-process nodes on 2
cores start 4 busy threads on 2 cores; their collectives then wait on threads
that are not scheduled. Measured here (tests/userrepo/repo/train.py, 2 nodes x 1
process on 2 cores, other work running: load 9-14): a median 4.7 s per epoch with
torch's default threads against 0.5 s with ``OMP_NUM_THREADS=1`` (plain torchrun);
under elastic-chaos 2.0 s with the user's ``OMP_NUM_THREADS=2`` against 0.34 s
with the 1 this module sets.

:func:`plan_threads` decides, from the cores, the nodes, the processes per node
and the environment the nodes would get, what to set: ``OMP_NUM_THREADS`` so the
job's threads fit the cores, unless the user set it (then only advice).
:func:`announce` puts a plan with advice on the run's timeline (``runner/threads``),
so the report says what the nodes ran with and why.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.events.runner_events import Threads

VAR = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class ThreadPlan:
    """What to set on every node, and what to tell the user (None: the threads fit)."""

    cores: int
    workers: int
    """Worker processes of the whole job on this machine (nodes x processes per node)."""
    threads: int
    """Threads each worker runs with once ``env`` is applied."""
    env: dict[str, str] = field(default_factory=dict)
    advice: str | None = None

    @property
    def oversubscribed(self) -> bool:
        """Whether the job's threads still outnumber the cores after the plan."""
        return self.workers * self.threads > self.cores


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def plan_threads(cores: int, nodes: int, nproc_per_node: int, env: Mapping[str, str]) -> ThreadPlan:
    """``OMP_NUM_THREADS`` for ``nodes`` nodes of ``nproc_per_node`` workers sharing ``cores`` cores,
    given the environment ``env`` the nodes would get otherwise (the runner's and the job's own).

    Unset: each worker gets ``cores // workers`` threads (at least 1) when torch's default (one
    per core; torchrun's 1 with several processes per node) would oversubscribe the cores, and
    nothing is set when it would not. Set by the user: it is kept, with advice when it
    oversubscribes. Pure: no environment is read or changed here."""
    cores, workers = max(1, cores), max(1, nodes) * max(1, nproc_per_node)
    fit = max(1, cores // workers)
    given = (env.get(VAR) or "").strip()
    if given:
        return _user_set(cores, workers, fit, given)
    default = 1 if nproc_per_node > 1 else cores  # torchrun sets 1 itself for several processes per node
    if workers * default <= cores:
        return ThreadPlan(cores, workers, default)
    plan = ThreadPlan(cores, workers, fit, {VAR: str(fit)})
    advice = (f"{workers} worker(s) ({nodes} node(s) x {nproc_per_node}) share this machine's {cores} core(s): "
              f"{VAR}={fit} set on every node (torch would run {default} thread(s) in each, "
              f"{workers * default} on {cores} cores, and training slows down many times over)")
    if plan.oversubscribed:
        advice += f"; still {workers} workers on {cores} cores: each trains slower than on a machine of its own"
    return replace(plan, advice=f"{advice}. Set {VAR} yourself (--env {VAR}=N) to choose.")


def _user_set(cores: int, workers: int, fit: int, given: str) -> ThreadPlan:
    """The user's ``OMP_NUM_THREADS`` is kept; advice when it oversubscribes the cores."""
    try:
        threads = int(given)
    except ValueError:
        return ThreadPlan(cores, workers, cores, advice=f"{VAR}={given!r} (yours, kept) is not a whole number; "
                                                        f"{VAR}={fit} fits {workers} worker(s) on {cores} core(s)")
    threads = min(max(1, threads), cores)  # torch runs no more intra-op threads than cores
    if workers * threads <= cores:
        return ThreadPlan(cores, workers, threads)
    return ThreadPlan(cores, workers, threads, advice=(
        f"{VAR}={given} (yours, kept): {workers} worker(s) x {threads} thread(s) = {workers * threads} on "
        f"{cores} core(s), oversubscribed, and training slows down many times over; {VAR}={fit} fits, or leave it "
        f"unset and elastic-chaos sets it"))


def announce(timeline: Timeline, plan: ThreadPlan) -> bool:
    """Record ``plan`` as ``runner/threads`` when it has advice (the job's threads would
    oversubscribe the cores, or still do); returns whether it did."""
    if plan.advice is None:
        return False
    timeline.emit(RunnerEv.THREADS, None, Threads(cores=plan.cores, workers=plan.workers, threads=plan.threads,
                                                  env=dict(plan.env), oversubscribed=plan.oversubscribed,
                                                  advice=plan.advice))
    return True
