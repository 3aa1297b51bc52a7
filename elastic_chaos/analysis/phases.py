"""Where a recovery's time went: the instants between its phases, and which phases apply.

elastic_chaos.analysis.recovery declares the phases (PHASE_METRICS); this module finds
the evidence for the ones that do not apply to every recovery:

- ``exit``: a survivor's collective failed (its traceback, or its NCCL
  watchdog's line) and its worker took this long to exit on its own. On GPUs
  the watchdog waits ``TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`` (60 s) for a debug
  dump first: that wait is here, not in the rendezvous.
- ``shutdown``: the agent sent a worker SIGTERM and killed it only after its
  shutdown wait (elastic_chaos.torch_defaults.AGENT_SHUTDOWN_WAIT_S), because the worker ignored the signal
  (``Unable to shutdown process ... forcefully exiting via 9``).
- ``stall``: the fault ended on its own (a freeze thawed, a partition healed)
  and training went on at the same world size without a restart: the whole
  recovery is one stall, and every restart phase does not apply.
- none at all: the job trained through a fault still in force when its window
  closed (a slow volume when the next fault came): nothing to recover from.

A phase that does not apply is listed in ``Recovery.not_applicable`` with why;
one whose evidence is missing stays None and ``missing`` says why. The phases
that apply add up to the regain time.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elastic_chaos.events import AgentEv, Event, FaultEv, ProgressEv, RunnerEv, field_value, first, of

RESTART_SIGNS = (AgentEv.WORKER_FAILED, AgentEv.WORKER_GROUP_FAILED, AgentEv.MEMBERSHIP_CHANGE,
                 AgentEv.RENDEZVOUS_STARTED, AgentEv.WORKERS_STOPPING, AgentEv.WORKERS_STARTING,
                 AgentEv.CLOSING_WORKER)
"""What an agent logs when it stops or restarts its workers: none of it happens in a stall."""


LOG_STAMP_S = 0.002
"""How much earlier than the instant it was written an agent's log line can be stamped (torch
logs milliseconds, truncated), with room for rounding."""


@dataclass(frozen=True)
class Mark:
    """The instant a phase ends, or why the phase does not apply (``event`` None and
    ``not_applicable`` set), or why its evidence is missing (``missing`` set)."""

    event: Event | None = None
    not_applicable: str | None = None
    missing: str | None = None


def collective_error(events: Sequence[Event], f: float, target: str | None,
                     until: float | None = None) -> Event | None:
    """The first failed collective a survivor's worker reported after the fault."""
    return first(events, ProgressEv.WORKER_ERROR, after=f, until=until, where=lambda e: e.node != target)


def worker_exit(events: Sequence[Event], f: float, target: str | None, end: float | None) -> Mark:
    """When the first survivor whose collective failed saw its worker exit on its own
    (its agent's ``failed (exitcode: ...)``), up to ``end`` (the round complete)."""
    error = collective_error(events, f, target, end)
    if error is None:
        return Mark(not_applicable="no survivor's collective failed")
    node = error.node
    exited = first(events, AgentEv.WORKER_FAILED, after=f, until=end, node=node)
    closed = first(events, AgentEv.CLOSING_WORKER, after=f, until=end, node=node)
    if closed is not None and (exited is None or closed.t < exited.t):
        return Mark(not_applicable=f"the agent on {node} stopped its workers before they exited")
    if exited is None:
        return Mark(missing=f"a collective failed on {node} but its worker's exit was not seen")
    return Mark(exited)


def forced_shutdown(events: Sequence[Event], f: float, target: str | None, end: float | None) -> Mark:
    """When a survivor's agent killed a worker that outlived its shutdown wait, up to ``end``."""
    killed = first(events, AgentEv.WORKER_KILL_FORCED, after=f, until=end, where=lambda e: e.node != target)
    if killed is None:
        return Mark(not_applicable="every worker stopped within the agent's shutdown wait")
    return Mark(killed)


def shutdown_wait(events: Sequence[Event], killed: Event) -> float | None:
    """Seconds from the agent's closing signal to the forced kill of the same worker."""
    sent = [e for e in of(events, AgentEv.CLOSING_WORKER, node=killed.node, until=killed.t)
            if e.data.pid == field_value(killed.data, "pid")]
    return killed.t - sent[-1].t if sent else None


def fault_end(events: Sequence[Event], f: float, fault: str, target: str | None) -> Event | None:
    """When the fault at ``f`` was undone (a thaw, a heal, the store back) while the run
    still watched (a revert at teardown is the toolkit's, not the job's)."""
    teardown = first(events, RunnerEv.PHASE, after=f, where=lambda e: e.data.phase == "teardown")
    return first(events, FaultEv.REVERTED, after=f, until=teardown.t if teardown else None,
                 where=lambda e: e.node == target and (e.data.fault or fault) == fault
                 and not (e.data.action or "").startswith("nothing"))


@dataclass(frozen=True)
class Stall:
    """Training went on after the fault ended, at the same world size, without a restart."""

    pre_step: int
    """The highest step completed before progress stopped."""
    regain: Event
    """The first step past ``pre_step`` once progress resumed."""
    ended: Event
    """The fault's end (fault/reverted)."""


def stall(events: Sequence[Event], f: float, fault: str, target: str | None,
          old: Callable[[Event], bool], world_size: int | None, until: float | None) -> Stall | None:
    """The stall a fault that ended on its own cost, or None when the job did anything
    else (restarted, resized, or has not trained on since the fault ended). ``old``
    tells a step of a worker that was running before the fault."""
    ended = fault_end(events, f, fault, target)
    if ended is None or world_size is None:
        return None
    steps = of(events, ProgressEv.STEP, until=until)
    after_end = first(steps, after=ended.t, where=old)
    if after_end is None or after_end.data.world_size != world_size:
        return None
    if first(events, *RESTART_SIGNS, after=f, until=after_end.t) is not None \
            or first(steps, after=f, until=after_end.t, where=lambda e: not old(e)) is not None:
        return None
    window = [e for e in steps if old(e) and e.t <= after_end.t]
    before = [e for e in window if e.t <= f]
    if not before:
        return None
    span = [before[-1], *(e for e in window if e.t > f)]
    resumed = max(zip(span, span[1:], strict=False), key=lambda p: p[1].t - p[0].t, default=(span[0], span[0]))[1]
    pre = max(e.data.step for e in window if e.t < resumed.t)
    regain = first(steps, after=resumed.t - 1e-9, where=lambda e: old(e) and e.data.step > pre)
    return Stall(pre, regain, ended) if regain is not None else None


@dataclass(frozen=True)
class Through:
    """Every node trained on through the fault, at the same world size, without a restart."""

    pre_step: int
    """The highest step completed before the fault."""
    past: Event
    """The first step past ``pre_step``."""
    last: Event
    """The last step of the fault's window."""


def trained_through(events: Sequence[Event], f: float, target: str | None, old: Callable[[Event], bool],
                    world_size: int | None, until: float | None) -> Through | None:
    """The job trained through the fault at ``f`` (a slowdown still in force when its window
    closed), or None. Only a closed window is judged: ``until`` (the next fault) or the run's
    teardown; while a run is live, a fault may yet stop the job (a spot notice before its
    SIGTERM). Through means: no agent stopped or restarted workers, no new worker, every
    step at ``world_size``, and each node that was keeping up before the fault (the target
    too) completed at least two more steps after it."""
    if world_size is None:
        return None
    if until is None:
        teardown = first(events, RunnerEv.PHASE, after=f, where=lambda e: e.data.phase == "teardown")
        if teardown is None:
            return None
        until = teardown.t
    # an agent's line is stamped to the millisecond below: one the next fault caused at once can
    # read as just before it
    if first(events, *RESTART_SIGNS, after=f, until=until - LOG_STAMP_S) is not None:
        return None
    steps = of(events, ProgressEv.STEP, until=until)
    before = [e for e in steps if e.t <= f]
    after = [e for e in steps if e.t > f]
    if not before or not after or any(not old(e) or e.data.world_size != world_size for e in after):
        return None
    pre = max(e.data.step for e in before)
    keeping_up = {e.node for e in before if e.data.step >= pre - 1}
    if any(max((e.data.step for e in after if e.node == n), default=pre) < pre + 2 for n in keeping_up):
        return None
    past = first(after, ProgressEv.STEP, where=lambda e: e.data.step > pre)
    return Through(pre, past, after[-1]) if past is not None else None


def unsettled_steps(events: Sequence[Event], f: float, target: str | None, old: Callable[[Event], bool],
                    until: float | None) -> list[Event]:
    """Steps a pre-fault worker reported after its own collective had failed: an NCCL
    communicator aborted under a blocked step lets that step finish with gradients that
    were never all-reduced, just before the watchdog takes the process down. Such a step
    is not progress the job can keep (nothing saved it), so it is not counted as lost."""
    errors = of(events, ProgressEv.WORKER_ERROR, after=f, until=until)
    out = []
    for e in of(events, ProgressEv.STEP, after=f, until=until):
        if e.node == target or not old(e):
            continue
        rank = e.data.rank
        if any(err.node == e.node and err.t < e.t and (err.data.rank if err.data.rank is not None else rank) == rank
               for err in errors):
            out.append(e)
    return out


def chain(f: float, marks: Sequence[tuple[str, Mark]]) -> dict[str, float | None]:
    """Each phase as the gap from the previous applicable mark to its own (never
    negative), in order; a phase that does not apply is None and skipped; from the
    first missing mark on, every later phase is None (nothing is guessed)."""
    out: dict[str, float | None] = {}
    prev: float | None = f
    for name, mark in marks:
        if mark.not_applicable is not None:
            out[name] = None
            continue
        if mark.event is None or prev is None:
            out[name] = None
            prev = None
            continue
        out[name] = max(0.0, mark.event.t - prev)
        prev = max(prev, mark.event.t)
    return out
