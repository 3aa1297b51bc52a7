"""How a job ended, from a timeline: still running, finished, or failed, with the cause.

A failure is told by its cause (a node's agent gave up after its restart budget, a rendezvous that
closed or timed out, a worker error) and, where the workers' tracebacks say, a root cause (the store
went away, a collective timed out). ``training_finished`` is the agent's word that the worker group
completed: a run that sees it before its fault has nothing left to test.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.events import (
    AgentEv,
    Event,
    NodeEv,
    ProgressEv,
    Source,
    field_value,
    first,
    of,
)


class JobState(enum.Enum):
    """Where a job is: still running, or gone (finished or failed)."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"

    def is_terminal(self) -> bool:
        return self is not JobState.RUNNING


class FailureCause(enum.Enum):
    """Why a node of a failed job is gone (one per node; ``JobOutcome.causes``)."""

    LOST_TO_FAULT = "lost_to_fault"
    """The node was taken away (``node/lost``)."""
    RENDEZVOUS_FAILED = "rendezvous_failed"
    """Its agent could not rendezvous (closed, timed out, store unreachable)."""
    RESTARTS_EXHAUSTED = "restarts_exhausted"
    """Its worker group failed more often than max_restarts allows and its agent gave up."""
    EXITED = "exited"
    """Its agent exited without any of the above in its log."""


class RootCause(enum.Enum):
    """What made a failed node's workers fail, when their errors name it: the thing a
    person has to fix, which "exhausted its restart budget" alone would hide."""

    DISK_FULL = "disk_full"
    """ENOSPC: no space left on the device (often the checkpoint volume)."""
    PERMISSION_DENIED = "permission_denied"
    """EACCES: a file or directory the workers could not write or read."""
    MISSING_FILE = "missing_file"
    """ENOENT: a file, directory or binary that is not there."""
    MISSING_MODULE = "missing_module"
    """A Python module the script imports is not installed where it runs."""
    OUT_OF_MEMORY = "out_of_memory"
    """Host or GPU memory ran out."""
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"
    """torch.load of a checkpoint that is half written, or was written by two nodes at once."""

    def describe(self) -> str:
        return {RootCause.DISK_FULL: "the disk is full (ENOSPC)",
                RootCause.PERMISSION_DENIED: "permission denied (EACCES)",
                RootCause.MISSING_FILE: "a file or binary is missing (ENOENT)",
                RootCause.MISSING_MODULE: "a Python module is missing",
                RootCause.OUT_OF_MEMORY: "out of memory",
                RootCause.CORRUPT_CHECKPOINT: "a checkpoint it loaded is corrupt: half written, or written by "
                                              "several nodes at once into one shared path (save through a "
                                              "temporary file and a rename, from one rank; or give each node "
                                              "its own folder: --node-local-workdir)"}[self]


_RDZV_FAILED = (AgentEv.RENDEZVOUS_CLOSED, AgentEv.RENDEZVOUS_TIMEOUT, AgentEv.RENDEZVOUS_ERROR)


@dataclass
class JobOutcome:
    """How a job ended (or that it has not). ``causes``: why its nodes are gone, to
    check in code; ``reasons``: the same for people, one line per node."""

    state: JobState
    reasons: list[str] = field(default_factory=list)
    causes: frozenset[FailureCause] = frozenset()
    root_causes: frozenset[RootCause] = frozenset()
    """What the failed nodes' workers' errors named (a full disk, ...), beside ``causes``."""

    @property
    def failed(self) -> bool:
        return self.state is JobState.FAILED


def training_finished(events: Sequence[Event]) -> Event | None:
    """The first sign that the job's training ended on its own: an agent logged that its worker
    group finished (its workers exited 0: torch's ``worker group successfully finished``), or a
    worker reported ``finished`` through elastic_chaos.trainer.progress. In an elastic job every worker ends
    together, so one agent's finished group is the job's."""
    return first(events, AgentEv.WORKERS_FINISHED, ProgressEv.FINISHED)


def job_outcome(events: Sequence[Event], job: Any = None) -> JobOutcome:
    """Why the job is gone, from the evidence: agents that gave up after spending
    their restart budget, rendezvous failures, node exits. ``job`` (a JobSpec)
    adds the configured budget to the wording."""
    events = sorted(events, key=lambda e: e.t)
    ends = {e.node: e for e in of(events, NodeEv.EXITED, NodeEv.LOST)}
    starts = {e.node for e in of(events, NodeEv.STARTED)}
    if not starts or starts - set(ends):
        return JobOutcome(JobState.RUNNING)
    if training_finished(events) is not None \
            and all(e.data.exit_code == 0 for e in ends.values() if e.type == NodeEv.EXITED):
        return JobOutcome(JobState.FINISHED, ["every node finished training"])
    why = [_node_failure(node, ends[node], of(events, Source.AGENT, node=node), getattr(job, "max_restarts", None))
           for node in sorted(n for n in ends if n)]
    reasons, roots = [], set()
    for (cause, text), node in zip(why, sorted(n for n in ends if n), strict=True):
        root = _root_cause(of(events, ProgressEv.WORKER_ERROR, node=node)) if cause is not FailureCause.LOST_TO_FAULT \
            else None
        if root is not None:
            roots.add(root[0])
            text = f"{text}; its workers failed with {root[1]}: {root[0].describe()}"
        reasons.append(text)
    return JobOutcome(JobState.FAILED, reasons, frozenset(cause for cause, _ in why), frozenset(roots))


def _root_cause(errors: list[Event]) -> tuple[RootCause, str] | None:
    """The last root cause a node's worker errors named, with the error line."""
    for e in reversed(errors):
        root = e.data.root
        if isinstance(root, str) and root in {r.value for r in RootCause}:
            line = f"{e.data.error or 'an error'}: {(e.data.message or '')[:160]}"
            return RootCause(root), line
    return None


def _node_failure(node: str, end: Event, agent: list[Event], budget: int | None) -> tuple[FailureCause, str]:
    """Why ``node`` is gone, from how it ended and its agent's events."""
    failures = of(agent, AgentEv.WORKER_GROUP_FAILED)
    rdzv = of(agent, *_RDZV_FAILED)
    if end.type == NodeEv.LOST:
        return FailureCause.LOST_TO_FAULT, f"{node} was lost to a fault ({end.data.action or 'killed'})"
    if rdzv:
        return (FailureCause.RENDEZVOUS_FAILED,
                f"{node} could not rendezvous: {field_value(rdzv[-1].data, 'error') or rdzv[-1].type.name}")
    if failures or first(agent, AgentEv.AGENT_GAVE_UP) is not None:
        spent = len(failures)
        return (FailureCause.RESTARTS_EXHAUSTED,
                f"{node} exhausted its restart budget: its worker group failed {spent + 1} time(s), "
                f"restarted {spent} time(s)" + (f" (max_restarts={budget})" if budget is not None else "")
                + ", then its agent gave up")
    return FailureCause.EXITED, f"{node} exited with code {end.data.exit_code}"
