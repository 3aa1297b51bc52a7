"""Recovery measured from a timeline: each fault's phases, lost progress and path (DESIGN.md, "Metrics").

:func:`analyze_fault` reads the events around one fault into a :class:`~elastic_chaos.analysis.recovery.Recovery`
(the model and its metrics live in recovery.py); :func:`analyze` does every fault of a timeline, each in
its window (up to the next independent fault). ``RECOVERY`` registers it as the first metric group.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import measured
from elastic_chaos.analysis.phases import (
    Mark,
    Stall,
    Through,
    chain,
    forced_shutdown,
    stall,
    trained_through,
    unsettled_steps,
    worker_exit,
)
from elastic_chaos.analysis.recovery import FIELD_METRICS, METRICS, PHASES, Recovery, RecoveryPath
from elastic_chaos.analysis.saves import saves
from elastic_chaos.analysis.steady import landing, restarts_before
from elastic_chaos.events import (
    AgentEv,
    CheckpointEv,
    Event,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    Source,
    field_value,
    first,
    last,
    of,
)

_DETECT = (ProgressEv.WORKER_ERROR, AgentEv.WORKER_FAILED, AgentEv.WORKER_GROUP_FAILED, AgentEv.MEMBERSHIP_CHANGE,
           AgentEv.RENDEZVOUS_STARTED, AgentEv.WORKERS_STOPPING)
"""What a survivor says when it notices a failure: its worker's collective failed, or its
agent saw a worker fail or restarts (on a node other than the target)."""


def _measure(events: Sequence[Event], mark: FaultMark) -> Recovery:
    return analyze_fault(events, fault=mark.fault, target=mark.target, injected_at=mark.injected_at, until=mark.until,
                         max_restarts=mark.max_restarts, unit=mark.unit)


RECOVERY = fault_group(
    "recovery", "Recovery", Recovery, key="metrics", prom="fault", metrics=METRICS, measure=_measure,
    read=lambda mark, raw: Recovery.from_json(mark.fault, mark.target, mark.injected_at, dict(raw)))
"""Every fault's recovery (report.json's ``metrics``; Prometheus ``elastic_chaos_fault_*``)."""


def first_detection(events: Iterable[Event], f: float, target: str | None) -> Event | None:
    """The first sign after ``f`` that the survivors noticed: an agent on another node
    saw a worker fail or restarted, or the rendezvous state changed in the store."""
    return first(events, *_DETECT, RdzvEv.STATE, after=f,
                 where=lambda e: e.type == RdzvEv.STATE or e.node != target)


SIGNAL_SLACK_S = 0.05
"""How much earlier than the termination the target's agent must have taken its death signal to
count as acting on the notice (log times are to the millisecond)."""


def acted_on_notice(events: Sequence[Event], injected_at: float, target: str | None) -> Event | None:
    """The interruption notice ``target``'s agent acted on before its termination at ``injected_at``
    (``--leave-on-notice``: the agent took a death signal after the notice and before the termination,
    stopped its workers and left the rendezvous); None when it did not."""
    if target is None:
        return None
    # this fault's notice, not one of an earlier fault on a node of the same name (a re-created pod)
    earlier = last(events, FaultEv.INJECTED, until=injected_at, where=lambda e: e.t < injected_at)
    notice = last(events, NodeEv.NOTICE, node=target, after=earlier.t if earlier is not None else None,
                  until=injected_at, where=lambda e: e.data.notice == "interruption")
    if notice is None:
        return None
    acted = first(events, AgentEv.SIGNAL_RECEIVED, node=target, after=notice.t,
                  where=lambda e: e.t < injected_at - SIGNAL_SLACK_S)
    return notice if acted is not None else None


def analyze_fault(events: Sequence[Event], *, fault: str, target: str | None,
                  injected_at: float, until: float | None = None,
                  max_restarts: int | None = None, unit: str = "step") -> Recovery:
    """Metrics for the fault at ``injected_at``; ``until`` bounds world_size_final
    (the next fault's time in a multi-fault run); ``unit``: what the job's progress counts,
    the word its notes use. Where the target's agent acted on an interruption notice before the
    termination (:func:`acted_on_notice`), every figure counts from that notice."""
    events = sorted(events, key=lambda e: e.t)
    notice = acted_on_notice(events, injected_at, target)
    rec = Recovery(fault=fault, target=target, injected_at=injected_at, restart_budget=max_restarts,
                   notice_lead_s=None if notice is None else round(injected_at - notice.t, 3))
    f = rec.measured_from
    steps = of(events, ProgressEv.STEP)
    before = of(steps, until=f)
    new_gen = _new_generation(events, f)
    if before:
        rec.world_size_before = before[-1].data.world_size or None
    else:
        rec.missing.append(f"no {unit} completed before the fault (no steady state)")
    stalled = stall(events, f, fault, target, lambda e: not new_gen(e), rec.world_size_before, until)
    if stalled is not None:
        return _finish(_stalled(rec, events, stalled, until, unit), events, unit)
    went_on = trained_through(events, f, target, lambda e: not new_gen(e), rec.world_size_before, until)
    if went_on is not None:
        return _finish(_through(rec, events, went_on, until, unit), events, unit)
    # Work counts as done by the pre-fault generation even when it finished just
    # after F: a gracefully stopped worker completes (and saves) its last step;
    # not a step its worker reported after its own collective failed (see unsettled_steps)
    unsettled = unsettled_steps(events, f, target, lambda e: not new_gen(e), until)
    skip = {id(e) for e in unsettled}
    old_gen = [e for e in steps if id(e) not in skip
               and (e.t <= f or (not new_gen(e) and (until is None or e.t <= until)))]
    rec.pre_step = max((e.data.step for e in old_gen), default=0)
    rec.unsettled_steps = len(unsettled)
    rec.notes += [f"{unit} {e.data.step} on {e.node} (rank {e.data.rank}) came after its worker's "
                  "collective had failed (an aborted NCCL communicator lets a blocked step finish on gradients "
                  "that were never all-reduced): it was never saved and is not counted as progress or as lost"
                  for e in unsettled]

    detect = first_detection(events, f, target)
    rdzv: Event | None = first(events, RdzvEv.ROUND_COMPLETE, after=f)
    if rdzv is None:  # no etcd watcher (c10d): fall back to the agents' own word
        rdzv = first(events, AgentEv.RENDEZVOUS_COMPLETE, after=f, where=lambda e: e.node != target)
    resumed = first(events, CheckpointEv.LOADED, after=f)
    first_new = first(steps, after=f, where=new_gen)
    regain = first(steps, after=f, where=lambda e: new_gen(e) and e.data.step > (rec.pre_step or 0))
    # ``until``: the next independent fault (a cascade fired by a trigger does not
    # end the window: see window_end); what follows it is that fault's recovery
    if until is not None:
        detect, rdzv, resumed, first_new, regain = (_by(detect, until), _by(rdzv, until), _by(resumed, until),
                                                     _by(first_new, until), _by(regain, until))
        if regain is None:
            rec.overtaken = True
            rec.missing.append("the next fault came before this one's recovery completed")

    rec.detect_s = _since(f, detect, "no survivor noticed the fault", rec)
    rec.rendezvous_s = _since(f, rdzv, "no rendezvous round completed after the fault", rec)
    rec.recovery_s = _since(f, first_new, f"no restarted worker completed a {unit}", rec)
    rec.regain_s = _since(f, regain, f"progress never passed the pre-fault {unit}", rec)
    if first_new is not None:
        rec.path = RecoveryPath.RESTART
    if resumed is not None:
        rec.resumed_from_step = resumed.data.step or 0
    elif first_new is not None:
        rec.resumed_from_step = first_new.data.step - 1
        rec.missing.append(f"no checkpoint-loaded event: the {unit} it resumed from is inferred from the first "
                           f"{unit} after the restart")
    if rec.resumed_from_step is not None and rec.pre_step is not None:
        rec.lost_steps = max(0, rec.pre_step - rec.resumed_from_step)
    if first_new is not None:
        rec.world_size_after = first_new.data.world_size or None
    window = of(steps, after=f, until=until)
    if window:
        rec.world_size_final = window[-1].data.world_size or None
    rec.replacement_s = _replacement(events, f, target, rec)
    rec.provision_s, rec.join_s, rec.rejoin_s = _machine_split(events, f, target, rec)
    rec.restarts_used = _restarts_used(events, f, until)
    # warm-up ends at the run's first fault: a later fault's restarts before it are the earlier
    # faults' recoveries, not an unsteady start
    first_fault = first(events, FaultEv.INJECTED)
    rec.restarts_before = restarts_before(events, min(f, first_fault.t) if first_fault is not None else f)
    if rec.restarts_before:
        rec.notes.append(f"{rec.restarts_before} worker-group restart(s) were spent before the fault (in warm-up): "
                         "the job was not steady, and the fault met a smaller restart budget")
    end = rdzv.t if rdzv is not None else (regain.t if regain is not None else until)
    exited, killed = worker_exit(events, f, target, end), forced_shutdown(events, f, target, end)
    marks = {"detect": Mark(detect), "exit": exited, "shutdown": killed, "rendezvous": Mark(rdzv),
             "restart": Mark(first_new), "retrain": Mark(regain),
             "stall": Mark(not_applicable="the workers were restarted" if first_new is not None else
                           "training did not go on by itself after the fault ended")}
    _set_phases(rec, f, marks)
    rec.evidence = _evidence(events, f, regain.t if regain else until,
                             [notice, detect, exited.event, killed.event, rdzv, resumed, first_new, regain])
    if notice is not None:
        rec.notes.append(_left_on_notice(rec, unit))
    return _finish(rec, events, unit)


def _left_on_notice(rec: Recovery, unit: str) -> str:
    """What acting on the notice did to this recovery, in words (``rec.notice_lead_s`` is set)."""
    lead = rec.notice_lead_s or 0.0
    said = (f"{rec.target}'s agent acted on the interruption notice {lead:.1f} s before the termination (it "
            f"stopped its workers and left the rendezvous then: --leave-on-notice), so every figure of this "
            f"recovery counts from the notice, not from the termination")
    after = rec.after_termination_s
    if after is None:
        return f"{said}; progress was not seen regained"
    if after == 0.0:
        ahead = lead - (rec.regain_s or 0.0)
        return (f"{said}; training was past {unit} {rec.pre_step}, where it had stopped, {ahead:.1f} s before the "
                "termination, which then cost no time")
    return f"{said}; progress was regained {after:.1f} s after the termination"


E = TypeVar("E", bound=Event)


def _by(mark: E | None, until: float) -> E | None:
    """``mark`` when it came no later than ``until``."""
    return mark if mark is not None and mark.t <= until else None


def _stalled(rec: Recovery, events: Sequence[Event], s: Stall, until: float | None, unit: str) -> Recovery:
    """A fault that ended on its own, training on without a restart: one stall, nothing lost."""
    f = rec.measured_from
    rec.path = RecoveryPath.STALL
    rec.pre_step = rec.resumed_from_step = s.pre_step
    rec.lost_steps = 0
    rec.regain_s = s.regain.t - f
    rec.world_size_after = s.regain.data.world_size or None
    window = of(events, ProgressEv.STEP, after=f, until=until)
    rec.world_size_final = window[-1].data.world_size or None
    why = "the fault ended on its own and the same workers trained on: no restart"
    marks = {p: Mark(not_applicable=why) for p in PHASES}
    marks["stall"] = Mark(s.regain)
    _set_phases(rec, f, marks)
    rec.notes.append(f"the job stalled {rec.regain_s:.1f} s and trained on at world size {rec.world_size_after} "
                     f"without a restart once the {rec.fault} ended (+{s.ended.t - f:.1f} s): 0 {unit}s lost")
    rec.evidence = _evidence(events, f, s.regain.t, [s.ended, s.regain])
    return rec


def _through(rec: Recovery, events: Sequence[Event], t: Through, until: float | None, unit: str) -> Recovery:
    """A fault the job trained through (a slowdown not over yet): nothing to recover, nothing lost."""
    f = rec.measured_from
    rec.path = RecoveryPath.THROUGH
    rec.pre_step = t.pre_step   # nothing resumed: resumed_from_step stays None
    rec.lost_steps = 0
    rec.regain_s = t.past.t - f
    rec.world_size_after = rec.world_size_final = t.last.data.world_size or None
    why = "the same workers trained on through the fault: no restart"
    _set_phases(rec, f, {p: Mark(not_applicable=why) for p in PHASES})
    upto = (f"until the next fault (+{until - f:.1f} s)" if until is not None and t.last.t <= until
            else f"to {unit} {t.last.data.step} (+{t.last.t - f:.1f} s)")
    rec.notes.append(f"the job trained on through the {rec.fault} at world size {rec.world_size_after}, "
                     f"every node stepping and no restart, {upto}: nothing to recover from, 0 {unit}s lost")
    rec.evidence = _evidence(events, f, t.last.t, [t.past, t.last])
    return rec


def _rounded(rec: Recovery) -> None:
    """Seconds to the millisecond report.json keeps, once, where they are measured: a check that quotes a
    figure and the report that renders it from report.json round the same number (11.4496 s and the 11.45
    written for it once showed as 11.5 s in summary.md and 11.4 s in `elastic-chaos report`)."""
    for m in FIELD_METRICS:
        value = m.of(rec)
        if isinstance(value, float):
            setattr(rec, m.key, round(value, 3))
    rec.phases = {k: None if v is None else round(v, 3) for k, v in rec.phases.items()}


def _set_phases(rec: Recovery, f: float, marks: dict[str, Mark]) -> None:
    rec.phases = chain(f, [(p, marks[p]) for p in PHASES])
    rec.not_applicable = {p: m.not_applicable for p, m in marks.items() if m.not_applicable is not None}
    rec.missing += [m.missing for m in marks.values() if m.missing is not None]


def _finish(rec: Recovery, events: Sequence[Event], unit: str) -> Recovery:
    _rounded(rec)
    rec.saves_before = len(saves(events, until=rec.measured_from))
    if rec.saves_before == 0 and rec.path is RecoveryPath.RESTART and rec.resumed_from_step == 0 and rec.lost_steps:
        rec.notes.append(f"no checkpoint was seen saved before the fault: training started over, so every {unit} "
                         f"since the start was lost ({rec.lost_steps})")
    for m in FIELD_METRICS:
        setattr(rec, m.key, measured(m.of(rec), rec, m.key))
    late = landing(events, rec.injected_at, unit)
    if late is not None:
        rec.notes.append(late)
    return rec


_NOTABLE = (Source.FAULT, Source.NODE, Source.AGENT, Source.RENDEZVOUS, Source.CHECKPOINT)


def _evidence(events: Sequence[Event], f: float, end: float | None, marks: list[Event | None]) -> list[Event]:
    """Notable events from 2 s before the fault to 1 s after ``end``, plus the marks."""
    stop = (end if end is not None else f + 60.0) + 1.0
    chosen = {id(m) for m in marks if m is not None}
    out = [e for e in events if f - 2.0 <= e.t <= stop
           and (id(e) in chosen or (e.type.source in _NOTABLE and e.type != RdzvEv.STATE))]
    last_before = of(events, ProgressEv.STEP, until=f)[-1:]
    return sorted(last_before + out, key=lambda e: e.t)[:80]


def _new_generation(events: Sequence[Event], f: float) -> Callable[[Event], bool]:
    """Whether a step event after ``f`` comes from a worker (re)started after the
    fault: by the process's own ``progress/start`` (its node and PID) when it reported
    one, else by a PID unseen before the fault, else by its agent having started a
    worker group on that node since the fault. (PIDs alone do not tell: in pods every
    incarnation counts from 1 in its own PID namespace, so a re-created pod's worker
    often has its predecessor's PID.)"""
    old_pids = {field_value(e.data, "pid") for e in of(events, Source.PROGRESS, until=f)} - {None}
    born: dict[tuple[str | None, Any], list[float]] = {}
    for e in of(events, ProgressEv.START):
        if e.data.pid is not None:
            born.setdefault((e.node, e.data.pid), []).append(e.t)
    starts: dict[str | None, list[float]] = {}
    for s in of(events, AgentEv.WORKERS_STARTING, after=f):
        starts.setdefault(s.node, []).append(s.t)

    def is_new(e: Event) -> bool:
        if e.t <= f:
            return False
        pid = e.data.pid
        if pid is None:
            return any(t <= e.t for t in starts.get(e.node, ()))
        seen = [t for t in born.get((e.node, pid), ()) if t <= e.t]
        if seen:
            return seen[-1] > f
        return pid not in old_pids

    return is_new


def _since(f: float, ev: Event | None, why: str, rec: Recovery) -> float | None:
    if ev is None:
        rec.missing.append(why)
        return None
    return ev.t - f


def _replacement(events: Sequence[Event], f: float, target: str | None, rec: Recovery) -> float | None:
    newcomers = {e.node for e in of(events, NodeEv.STARTED, after=f) if e.data.replaces == target}
    if not newcomers:
        return None
    joined = first(events, RdzvEv.ROUND_COMPLETE, after=f,
                   where=lambda e: any(p.node in newcomers for p in e.data.participants))
    if joined is None:
        rec.missing.append("a replacement node started but never joined a complete round")
        return None
    return joined.t - f


def _machine_split(events: Sequence[Event], f: float, target: str | None,
                   rec: Recovery) -> tuple[float | None, float | None, float | None]:
    """provision / join / rejoin, as a game day splits a replacement, where the node pool
    replaced the lost node's machine (``node/provisioned`` names it); all None elsewhere."""
    if first(events, NodeEv.PROVISIONING, after=f - 1.0, where=lambda e: e.data.replaces == target
             and e.data.machine is not None) is None:
        return None, None, None
    made = first(events, NodeEv.PROVISIONED, after=f, where=lambda e: e.data.replaces == target)
    if made is None:
        rec.missing.append("the replacement machine never joined the cluster")
        return None, None, None
    machine = made.data.machine
    added = first(events, NodeEv.MACHINE_ADDED, after=f, where=lambda e: e.data.machine == machine)
    ready = first(events, NodeEv.MACHINE_READY, NodeEv.MACHINE_ADDED, after=f,
                  where=lambda e: e.data.machine == machine and (e.type == NodeEv.MACHINE_READY
                                                                 or e.data.ready is True))
    provision = None if added is None else added.t - f
    join = None if added is None or ready is None else max(0.0, ready.t - added.t)
    rejoin = None
    if ready is not None and rec.replacement_s is not None:
        rejoin = max(0.0, f + rec.replacement_s - ready.t)
    if added is None or ready is None:
        rec.missing.append(f"the replacement machine {machine} was not seen registering and turning Ready")
    return provision, join, rejoin


def _restarts_used(events: Sequence[Event], f: float, until: float | None) -> int:
    """The most worker-group restarts any one agent spent after the fault (each
    agent has its own max_restarts budget; membership changes do not count)."""
    per_node: dict[str | None, int] = {}
    for e in of(events, AgentEv.WORKER_GROUP_FAILED, after=f, until=until):
        per_node[e.node] = per_node.get(e.node, 0) + 1
    return max(per_node.values(), default=0)


def faults_in(events: Sequence[Event]) -> list[Event]:
    """The injected-fault events of a timeline, in time order."""
    return of(events, FaultEv.INJECTED)


def window_end(injected_at: float, faults: Sequence[tuple[float, bool]]) -> float | None:
    """Where the recovery window of the fault at ``injected_at`` ends: at the next
    fault that was not fired by a trigger. ``faults``: (injected_at, triggered)."""
    later = [t for t, triggered in faults if t > injected_at and not triggered]
    return min(later, default=None)


def analyze(events: Sequence[Event]) -> list[Recovery]:
    """One Recovery per injected fault in the timeline (a triggered fault — a
    cascade — stays inside the window of the fault before it)."""
    faults = faults_in(events)
    marks = [(fe.t, fe.data.trigger is not None) for fe in faults]
    return [analyze_fault(events, fault=fe.data.fault, target=fe.node,
                          injected_at=fe.t, until=window_end(fe.t, marks)) for fe in faults]

