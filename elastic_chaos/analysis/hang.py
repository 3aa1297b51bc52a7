"""How a job found out that one of its workers hung: by its collective timeout, or not.

A hung worker (its process alive, its node alive) sends nothing more; its
peers block in their next collective and only their collective timeout (the
process group's ``timeout``, the reference trainer's ``--pg-timeout``; on
NCCL its watchdog) ends the wait. Nothing else tells: the agent of the hung
worker sees a live process, the rendezvous sees a live agent. So detection
should come at the timeout, from a collective that failed with a timeout,
and the hung worker should not be reported failed before its peers gave up.
:class:`HangDetection` holds that evidence beside the fault's Recovery.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.events import AgentEv, Event, NodeEv, ProgressEv, first, of


@dataclass
class HangDetection:
    """What ended the peers' wait for a hung worker (None: not observed; ``missing`` says why)."""

    target: str | None
    injected_at: float
    pg_timeout_s: float | None = metric("collective timeout", Unit.SECONDS, "the job's collective timeout "
                                        "(the process group's timeout: --pg-timeout)", junit=True)
    timed_out_s: float | None = metric("collective timed out", Unit.SECONDS, "hang -> the first peer's "
                                       "collective failed with a timeout", table=True, junit=True,
                                       failure=True)
    hung_ended_s: float | None = metric("hung worker replaced", Unit.SECONDS, "hang -> the hung worker's "
                                        "agent started a new worker group (it had to kill the hung one: "
                                        "a stopped process does not act on SIGTERM)", junit=True)
    causes: list[str] = field(default_factory=list)
    """Why the peers' collectives failed (timeout, connection_closed, other), sorted."""
    first_error: dict[str, Any] | None = None
    """The first peer's collective error: node, rank, message."""
    reported_early: bool = False
    """The hung worker was reported failed before any peer's collective timed out (not a hang)."""
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {m.key: None if (v := getattr(self, m.key)) is None else round(float(v), 3)
                               for m in METRICS}
        out.update({"causes": list(self.causes), "first_error": self.first_error,
                    "reported_early": self.reported_early, "missing": list(self.missing)})
        return out

    @classmethod
    def from_json(cls, target: str | None, injected_at: float, raw: dict[str, Any]) -> HangDetection:
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        err = raw.get("first_error")
        return cls(target, injected_at, causes=[str(c) for c in raw.get("causes") or []],
                   first_error=err if isinstance(err, dict) else None,
                   reported_early=raw.get("reported_early") is True,
                   missing=[str(m) for m in raw.get("missing") or [] if isinstance(m, str)], **values)


METRICS: tuple[Metric, ...] = declared(HangDetection)
"""The hang metrics, in declaration order."""


def peer_errors(events: Sequence[Event], *, target: str | None, injected_at: float) -> list[Event]:
    """The collective errors workers outside ``target`` reported after ``injected_at``, in time
    order: how the rest of the job found out about a node that went silent or a worker that hung."""
    return [e for e in of(events, ProgressEv.WORKER_ERROR, after=injected_at) if e.node != target]


def hang_detection(events: Sequence[Event], *, target: str | None, injected_at: float,
                   pg_timeout_s: float | None, hung_pid: int | None = None) -> HangDetection:
    """The HangDetection of the worker ``hung_pid`` of ``target`` hung at ``injected_at``."""
    events = sorted(events, key=lambda e: e.t)
    out = HangDetection(target, injected_at, pg_timeout_s=pg_timeout_s)
    if pg_timeout_s is None:
        out.missing.append("the job's collective timeout is not known (a script sets its own; pass --pg-timeout "
                           "to say what it is)")
    errors = peer_errors(events, target=target, injected_at=injected_at)
    out.causes = sorted({str(e.data.cause) for e in errors})
    timed_out = first(errors, ProgressEv.WORKER_ERROR, where=lambda e: e.data.cause == "timeout")
    if timed_out is None:
        out.missing.append("no peer's collective failed with a timeout")
    else:
        out.timed_out_s = timed_out.t - injected_at
        out.first_error = {"node": timed_out.node, "rank": timed_out.data.rank,
                           "message": (timed_out.data.message or "")[:200]}
    failed = first(events, AgentEv.WORKER_FAILED, node=target, after=injected_at,
                   where=lambda e: hung_pid is None or e.data.pid == hung_pid)
    if failed is not None and (timed_out is None or failed.t < timed_out.t):
        out.reported_early = True
    restarted = first(events, AgentEv.WORKERS_STARTING, node=target, after=injected_at)
    out.hung_ended_s = restarted.t - injected_at if restarted is not None else None
    if restarted is None:
        out.missing.append(f"{target}'s agent never started a new worker group after the hang")
    return out


def _measure(events: Sequence[Event], mark: FaultMark) -> HangDetection:
    """The hung worker's PID is the record's ``pid``, else the ``node/worker_hung`` event's; the
    collective timeout the record's ``pg_timeout_s``."""
    pid = mark.detail.get("pid")
    if not isinstance(pid, int):
        hung = first(events, NodeEv.WORKER_HUNG, node=mark.target, after=mark.injected_at - 1.0)
        pids = hung.data.pids if hung is not None else ()
        pid = pids[0] if pids else None
    timeout = mark.detail.get("pg_timeout_s")
    return hang_detection(events, target=mark.target, injected_at=mark.injected_at,
                          pg_timeout_s=float(timeout) if isinstance(timeout, (int, float)) else None,
                          hung_pid=pid if isinstance(pid, int) else None)


HANG = fault_group(
    "hang", "Hang detection", HangDetection, faults={"hung-rank"}, measure=_measure,
    read=lambda mark, raw: HangDetection.from_json(mark.target, mark.injected_at, dict(raw)))
"""How a hung worker was found out (report.json's ``hang``)."""
