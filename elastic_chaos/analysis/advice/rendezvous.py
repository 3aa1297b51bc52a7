"""Tuning advice from what this run measured, never generic tips.

Each finding names the setting that held recovery back, the seconds it cost in
*this* run (from the timeline), and what a change would buy, computed from
the same numbers. A finding is made only when its cost is a real share of the
fault's regain time (``SHARE`` and ``MIN_COST_S``):

- keep-alive expiry: after a hard loss the dead node stays a rendezvous
  participant until its last heartbeat is ``keep_alive_interval x
  keep_alive_max_attempt`` old; the survivors wait in the wait list until then
  (seen in the etcd rendezvous states: when the target leaves the state).
- last call: once ``min_nodes`` joined an incomplete round, torch waits
  ``last_call_timeout`` for more before closing it, unless ``max_nodes`` join
  first (seen as: round reached min size at t1, completed below max size at t2).
- replay: steps lost since the last checkpoint are trained again;
  ``checkpoint_every`` bounds them (the checkpoint save time is measured too).
- restart: no rendezvous setting governs it; the breakdown says where it went
  (worker start, checkpoint load, first step).
- the workers' side (elastic_chaos.analysis.advice.workers): the collective timeout,
  NCCL's dump wait and heartbeat, the agent's shutdown wait.
"""
from __future__ import annotations

from collections.abc import Sequence

from elastic_chaos import torch_defaults
from elastic_chaos.analysis.advice.evidence import RunEvidence
from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.advice.storage import storage_findings
from elastic_chaos.analysis.advice.workers import worker_findings
from elastic_chaos.analysis.goodput import step_time_at, step_time_s
from elastic_chaos.analysis.metrics import count
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.saves import save_duration_s
from elastic_chaos.events import AgentEv, CheckpointEv, Event, ProgressEv, RdzvEv, first, last, of
from elastic_chaos.spec import PRESETS, JobSpec, Preset, RdzvBackend

SHARE = 0.2
MIN_COST_S = 1.0

LAST_CALL_SUGGESTED = 5
"""Seconds of last call suggested: short, yet room for a replacement already on its way."""



def _setting(job: JobSpec | None, name: str) -> tuple[float, bool]:
    """(value, is_torch_default) of a rendezvous setting of the job."""
    value = getattr(job.rdzv, name, None) if job is not None else None
    if isinstance(value, (int, float)):
        return float(value), False
    return float(torch_defaults.RDZV[name]), True


def _g(v: float) -> str:
    return f"{v:g}"


def advise(run: RunEvidence) -> list[Finding]:
    """Findings for every fault of the run."""
    out: list[Finding] = []
    for i, fault in enumerate(run.faults):
        regain = fault.recovery.regain_s
        total = float(regain) if regain is not None and regain > 0 else None
        for finding in (_keep_alive(run, i, fault), _last_call(run, i, fault),
                        _retrain(run, i, fault), _restart(run, i, fault), *worker_findings(run, i, fault)):
            if finding is None:
                continue
            if total is not None and finding.cost_s < SHARE * total:
                continue
            if finding.cost_s >= MIN_COST_S:
                out.append(finding)
        if _c10d(run) and _phase(fault, "rendezvous") and total and _phase(fault, "rendezvous") >= SHARE * total:
            out.append(Finding(i, "rendezvous", None, _phase(fault, "rendezvous"),
                               f"rendezvous took {_phase(fault, 'rendezvous'):.1f} s of {total:.1f} s, but with "
                               "the c10d backend its internals (who waited for whom) are not observable; "
                               "rerun on etcd-v2 to attribute it to keep-alive expiry or last call.",
                               change=("--rdzv-backend", "etcd-v2")))
        out.extend(storage_findings(i, fault))   # elastic_chaos.analysis.advice.storage: the checkpoint volume
    return out


def _phase(fault: FaultResult, name: str) -> float:
    return fault.phases.get(name) or 0.0


def _c10d(run: RunEvidence) -> bool:
    return run.result.job is not None and run.result.job.rdzv.backend is RdzvBackend.C10D


def _states(run: RunEvidence, start: float, end: float) -> list[Event]:
    return of(run.events, RdzvEv.STATE, after=start, until=end)


def _members(e: Event, key: str) -> set[str]:
    return set(e.data.nodes(key))


def _ids_of(e: Event, node: str) -> set[str]:
    return {str(p.id) for p in e.data.participants if p.node == node}


def _rdzv_done(fault: FaultResult) -> float | None:
    r = fault.recovery.rendezvous_s
    return fault.measured_from + r if r is not None else None


def _keep_alive(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    done = _rdzv_done(fault)
    if fault.target is None or done is None:
        return None
    f = fault.measured_from
    before = last(run.events, RdzvEv.STATE, until=f)
    ids = _ids_of(before, fault.target) if before is not None else set()
    after = _states(run, f, done)
    if not after or not (_present(after[0], fault.target, ids)):
        return None  # the target left the rendezvous at once (it said goodbye): no expiry wait
    gone = next((e for e in after if not _present(e, fault.target, ids)), None)
    if gone is None:
        return None
    detect = fault.recovery.detect_s
    waiting_from = f + (detect or 0.0)
    # the round waits for the dead node only once every survivor's agent asked for one
    survivors = {e.node for e in of(run.events, ProgressEv.STEP, until=f)} - {fault.target}
    asked = [first(run.events, AgentEv.RENDEZVOUS_STARTED, after=f, node=n) for n in survivors]
    if asked and all(a is not None for a in asked):
        waiting_from = max(waiting_from, *(a.t for a in asked if a is not None))
    cost = gone.t - waiting_from
    if cost <= 0:
        return None  # the dead node had left before anyone waited for it (NCCL's dump wait, say)
    interval, d1 = _setting(run.result.job, "keep_alive_interval")
    attempts, d2 = _setting(run.result.job, "keep_alive_max_attempt")
    origin = "torch defaults" if d1 and d2 else "as set for this job"
    text = (f"{cost:.1f} s waiting for {fault.target}'s keep-alive to expire: a dead node stays a "
            f"rendezvous participant until its last heartbeat is keep_alive_interval x "
            f"keep_alive_max_attempt = {_g(interval)} s x {_g(attempts)} = {_g(interval * attempts)} s old "
            f"({origin}). The survivors waited from +{waiting_from - f:.1f} s; {fault.target} left the "
            f"rendezvous at +{gone.t - f:.1f} s.")
    beat = _last_heartbeat(run.events, ids, gone.t)
    if beat is not None and not fault.observed:  # an observed loss is timed at that heartbeat
        when = f"{f - beat:.1f} s before the fault" if beat <= f else \
            f"{beat - f:.1f} s after the fault (it was still shutting down and never left the rendezvous)"
        text += f" Its last heartbeat was {when}, so it was due to expire at +{beat + interval * attempts - f:.1f} s."
    change, torchrun, saved, why = _shorter_expiry(run.result.job, interval, attempts, cost)
    text += why
    return Finding(i, "rendezvous", "keep_alive_interval x keep_alive_max_attempt", cost, text,
                   change=change, torchrun=torchrun, saved_s=saved)


def _on_torch_defaults(job: JobSpec | None) -> bool:
    """No rendezvous or recovery knob of a preset was set: ``--rdzv-preset fast`` changes only defaults."""
    if job is None:
        return True
    return all(getattr(job.rdzv, k) is None for k in Preset.RDZV_KNOBS) and \
        all(getattr(job, k) is None for k in Preset.JOB_KNOBS if k != "monitor_interval")


def _shorter_expiry(job: JobSpec | None, interval: float, attempts: float,
                    cost: float) -> tuple[tuple[str, ...], str | None, float | None, str]:
    """The keep-alive change (flags, by hand, seconds saved, why): the fast preset's expiry, else half
    the interval (an integer: torch reads it as whole seconds), else none."""
    fast = PRESETS["fast"]
    f_int, f_att = fast.keep_alive_interval or 1, fast.keep_alive_max_attempt or 4
    expiry, f_expiry = interval * attempts, f_int * f_att
    if expiry > f_expiry:
        change = (("--rdzv-preset", "fast") if _on_torch_defaults(job) else
                  ("--keep-alive-interval", str(f_int), "--keep-alive-max-attempt", str(f_att)))
        why = (f" The fast preset's keep-alive ({f_int} s x {f_att} = {_g(f_expiry)} s) would have cut the "
               f"wait by up to {_g(expiry - f_expiry)} s" + (" (the preset also shortens the last call, the "
                                                                "collective timeout and NCCL's waits: "
                                                                "docs/PRESETS.md)" if change[0] == "--rdzv-preset"
                                                               else "")
               + f"; fewer than {f_att} attempts left no margin under load here (a live node declared dead).")
        return change, f"--rdzv-conf keep_alive_interval={f_int},keep_alive_max_attempt={f_att}", \
            min(cost, expiry - f_expiry), why
    if interval >= 2:
        half = int(interval) // 2
        return (("--keep-alive-interval", str(half)), f"--rdzv-conf keep_alive_interval={half}",
                min(cost, (interval - half) * attempts),
                f" keep_alive_interval={half} would cut the expiry to {_g(half * attempts)} s (more etcd writes, "
                "and a slow node is declared dead sooner).")
    return (), None, None, (" This is already the shortest expiry measured safe here (docs/PRESETS.md): "
                            "fewer attempts risk a live node declared dead.")


def _last_heartbeat(events: Sequence[Event], ids: set[str], before: float) -> float | None:
    """The target's last heartbeat seen in the rendezvous states (watchers that record them)."""
    beats = [float(v) for e in of(events, RdzvEv.STATE, until=before)
             for k, v in e.data.heartbeats.items() if k in ids]
    return max(beats, default=None)


def _present(e: Event, node: str, ids: set[str]) -> bool:
    names = _members(e, "participants") | _members(e, "wait_list")
    return node in names or bool(ids & names) or bool(ids & _raw_ids(e))


def _raw_ids(e: Event) -> set[str]:
    return {str(p.id) for p in (*e.data.participants, *e.data.wait_list)}


def _last_call(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    done = _rdzv_done(fault)
    if done is None:
        return None
    complete = first(run.events, RdzvEv.ROUND_COMPLETE, where=lambda e: abs(e.t - done) < 1e-3)
    if complete is None:
        return None
    lo, hi = _node_range(run.result.job)
    size = len(complete.data.participants)
    rnd = complete.data.round
    forming = [e for e in _states(run, fault.measured_from, done) if e.data.round == rnd
               and not e.data.complete and len(e.data.participants) >= lo]
    if not forming or hi is None or size >= hi:
        return None  # max_nodes joined: the last call ended early
    lct, default = _setting(run.result.job, "last_call_timeout")
    waited = complete.t - forming[0].t
    if waited < 0.5 * lct:
        return None
    text = (f"{waited:.1f} s in the last call: round {rnd} had min_nodes={lo} at "
            f"+{forming[0].t - fault.measured_from:.1f} s but torch kept it open for "
            f"last_call_timeout={_g(lct)} s ({'torch default' if default else 'as set for this job'}) "
            f"waiting for up to max_nodes={hi}; it closed with {size} node(s). Every shrink without "
            f"a replacement pays this in full. Keep it above the time a replacement takes to "
            f"join if the job should regrow in the same round"
            + (f" ({_replacement_note(fault)})." if _replacement_note(fault) else "."))
    if lct <= LAST_CALL_SUGGESTED:
        return Finding(i, "rendezvous", "last_call_timeout", waited, text)
    return Finding(i, "rendezvous", "last_call_timeout", waited, text,
                   change=("--last-call-timeout", str(LAST_CALL_SUGGESTED)),
                   torchrun=f"--rdzv-conf last_call_timeout={LAST_CALL_SUGGESTED}",
                   saved_s=max(0.0, waited - LAST_CALL_SUGGESTED))


def _replacement_note(fault: FaultResult) -> str:
    r = fault.recovery.replacement_s
    return f"this run: a replacement joined after {r:.1f} s" if r is not None else \
        "this run: no replacement joined"


def _node_range(job: JobSpec | None) -> tuple[int, int | None]:
    if job is None:
        return 1, None
    return job.min_nodes, job.max_nodes


def _retrain(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    replay = fault.phases.get("retrain")
    lost = fault.recovery.lost_steps
    every = run.result.job.checkpoint_every if run.result.job is not None else None
    if replay is None or not isinstance(lost, int) or not isinstance(every, int):
        return None
    unit = run.result.progress_unit
    save = save_duration_s(run.events)
    text = (f"{replay:.1f} s retraining {count(lost, unit)} lost since the last checkpoint "
            f"(a save every {count(every, unit)}")
    # the worst case is paid after the fault: at the world size training resumed at, whose pace differs
    world = fault.recovery.world_size_after
    pace = step_time_at(run.events, world, after=fault.measured_from) if world else None
    where = f" at world size {world}" if pace else " before the fault"
    pace = pace or step_time_s(run.events)
    if pace:
        text += (f"; the worst case is {count(every, unit)}, about {every * pace:.1f} s at {pace:.2f} s per "
                 f"{unit}{where}")
    text += ")."
    half = max(1, every // 2)
    if every <= 1:
        return Finding(i, "retrain", "checkpoint_every", replay, text)
    cost = f" for about {save:.2f} s more saving every {count(half, unit)}" if save is not None else ""
    script = bool(run.result.job is not None and run.result.job.script)
    if script:  # the script's own interval: elastic-chaos cannot change it
        text += f" Saving every {count(half, unit)} in the script halves the worst case{cost}."
        return Finding(i, "retrain", "checkpoint_every", replay, text)
    text += f" checkpoint_every={half} halves the worst case{cost}."
    pre = fault.recovery.pre_step
    saved = None
    if isinstance(pre, int) and lost > 0:
        saved = max(0.0, (lost - pre % half) * replay / lost)  # steps this run would not have trained again
    return Finding(i, "retrain", "checkpoint_every", replay, text, change=("--checkpoint-every", str(half)),
                   torchrun=f"the trainer's own --checkpoint-every {half}", saved_s=saved)


def _restart(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    restart = fault.phases.get("restart")
    done = _rdzv_done(fault)
    regain = fault.recovery.recovery_s
    if restart is None or done is None or regain is None:
        return None
    first_step = fault.measured_from + float(regain)
    window = [e for e in run.events if done <= e.t <= first_step]
    up = first(window, ProgressEv.START)
    loaded = first(window, CheckpointEv.LOADED)
    parts = []
    if up is not None:
        parts.append(f"workers reported in {up.t - done:.1f} s after the round completed "
                     "(process start, imports, process group)")
    if loaded is not None:
        parts.append(f"the checkpoint was loaded at +{loaded.t - done:.1f} s")
    parts.append(f"the first {run.result.progress_unit} completed at +{first_step - done:.1f} s")
    text = (f"{restart:.1f} s restarting workers; no rendezvous setting governs this: "
            + "; ".join(parts) + ".")
    return Finding(i, "restart", None, restart, text)
