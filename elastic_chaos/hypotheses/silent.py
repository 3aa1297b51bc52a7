"""Hypotheses where a node goes silent, a notice comes first, or the store blinks."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from elastic_chaos.analysis.hang import peer_errors
from elastic_chaos.analysis.recovery import Recovery, RecoveryPath
from elastic_chaos.analysis.saves import saves
from elastic_chaos.analysis.timeouts import TRAINER_PG_TIMEOUT_S
from elastic_chaos.events import CheckpointEv, Event, ProgressEv, RunnerEv, field_value
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.node import KillNode
from elastic_chaos.faults.spot import AWS_TIMING, SpotInterruption
from elastic_chaos.faults.store import EtcdOutage
from elastic_chaos.faults.triggers import during_rendezvous
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.hypotheses.final import FinalStateOptions, check_final_state, prepare
from elastic_chaos.options import option, validate
from elastic_chaos.spec import JobSpec, PgBackend
from elastic_chaos.torch_defaults import PG_TIMEOUT_S

SILENT_PG_TIMEOUT_S = 15.0
"""A collective timeout short enough that a silent node is found out in seconds
(the reference trainer's own default is 60 s, gloo's 30 min)."""

MARGIN_S = 2.0
"""A fault ending this close to the collective timeout may go either way."""


class Expect(enum.Enum):
    """What a silent node should cost, from the fault's duration and the collective timeout."""

    STALL = "stall"
    """The fault ends before the survivors' collective times out: they wait, then train on."""
    TIMEOUT = "timeout"
    """The collective times out first: the survivors restart without the silent node."""
    EITHER = "either"
    """Too close to call (or the script's own timeout is unknown): either outcome is fine."""


def expectation(duration_s: float | None, timeout_s: float, known: bool) -> Expect:
    """``duration_s`` None: the fault lasts until the end of the run."""
    if duration_s is None:
        return Expect.TIMEOUT
    if not known:
        return Expect.EITHER
    if duration_s <= timeout_s - max(MARGIN_S, 0.1 * timeout_s):
        return Expect.STALL
    return Expect.TIMEOUT if duration_s >= timeout_s + MARGIN_S else Expect.EITHER


def _silent(t: Trial) -> None:
    """A node goes silent (no resets): the survivors find out by their collective timeout,
    unless the fault ends first, and then they simply train on (a stall, 0 steps lost)."""
    timeout, source, known = collective_timeout(t.job)
    fault = t.fault()
    duration = fault.duration_s
    expect = expectation(duration, timeout, known)
    t.start()
    t.steady()
    record = t.inject(fault)
    rec = t.recover(record, extra_s=max(timeout, duration or 0.0))
    causes = collective_failures(t.run.timeline.events(), record)
    t.check_recovered(rec)
    why = (f"the {record.fault} lasts {duration:g}s" if duration is not None else f"the {record.fault} lasts until "
           "the end of the run") + f", the collective timeout is {timeout:g}s ({source})"
    if expect is Expect.STALL:
        t.verdict.require(rec.path is RecoveryPath.STALL and rec.restarts_used == 0,
                          f"expected a stall ({why}): training went on without a restart once it ended "
                          f"({_how(rec)})", check="stall")
        t.verdict.require(rec.lost_steps == 0, f"a stall loses nothing: lost_steps {rec.lost_steps}",
                          check="nothing-lost")
        return
    if expect is Expect.EITHER:
        t.verdict.require(rec.recovered, f"either outcome is fine ({why}): {_how(rec)}", check="outcome")
        return
    t.verdict.require(rec.path is RecoveryPath.RESTART, f"expected a restart without the silent node ({why}): "
                                                        f"{_how(rec)}", check="restarted")
    t.verdict.require(causes == ["timeout"],
                      f"survivors found out by a timeout, not a closed connection (collective errors: {causes})",
                      check="silent")
    failed_s = first_collective_failure_s(t.run.timeline.events(), record)
    # the survivors' own collective failing is what ends the wait; a keep-alive shorter than the
    # collective timeout lets the store drop the silent node first (detect_s), but nobody acts on it
    store = (f" (the store had dropped the silent node after {seconds(rec.detect_s)}, its keep-alive expiry, "
             "which no agent acts on)"
             if rec.detect_s is not None and failed_s is not None and rec.detect_s < failed_s - 0.5 else "")
    t.verdict.require(failed_s is not None and failed_s >= 0.5 * timeout,
                      f"the survivors' collective failed after {seconds(failed_s)}, driven by the {timeout:g}s "
                      f"collective timeout{store}", check="detected-by-timeout")
    if not t.replaces_nodes:
        t.verdict.require(rec.world_size_after == (rec.world_size_before or 0) - t.job.nproc_per_node,
                          f"the silent node was dropped: world size {rec.world_size_before} -> "
                          f"{rec.world_size_after}", check="world-size")


def first_collective_failure_s(events: list[Event], record: FaultRecord) -> float | None:
    """Seconds from ``record``'s injection to the first collective a survivor saw fail."""
    failed = peer_errors(events, target=record.target, injected_at=record.injected_at)
    return failed[0].t - record.injected_at if failed else None


def collective_timeout(job: JobSpec) -> tuple[float, str, bool]:
    """(seconds, where the value comes from, whether it is known): the reference trainer's
    ``--pg-timeout`` (the job's, else the trainer's 60 s default); a script's own is unknown,
    torch's default for its backend assumed."""
    if not job.script:
        if job.pg_timeout_s is not None:
            return job.pg_timeout_s, "the job's --pg-timeout", True
        return TRAINER_PG_TIMEOUT_S, "the reference trainer's default", True
    backend = job.backend or PgBackend.GLOO
    assumed = "" if job.backend else f" (the script's backend assumed {backend.value}: --backend says it)"
    return PG_TIMEOUT_S[backend.value], f"torch's {backend.value} default, if the script sets none{assumed}", False


def _how(rec: Recovery) -> str:
    if rec.path is RecoveryPath.STALL:
        return (f"stalled {seconds(rec.regain_s)} at world size {rec.world_size_after}, "
                f"{rec.restarts_used} restart(s), {rec.lost_steps} step(s) lost")
    if rec.path is RecoveryPath.RESTART:
        return (f"restarted: detected after {seconds(rec.detect_s)}, world size {rec.world_size_before} -> "
                f"{rec.world_size_after}, {rec.lost_steps} step(s) lost")
    return "training did not go on"


def collective_failures(events: list[Event], record: FaultRecord) -> list[str]:
    """Why the survivors' collectives failed after ``record`` (timeout, connection_closed;
    an NCCL watchdog line that does not say which is left out)."""
    return sorted({str(e.data.cause) for e in peer_errors(events, target=record.target,
                                                                 injected_at=record.injected_at)
                   if e.data.cause != "unknown"})


@hypothesis("partition", "network black hole around one node: no packet in or out, no reset (root)",
            fault="partition", defaults={"pg_timeout_s": SILENT_PG_TIMEOUT_S}, forced={"network": "isolated"})
def partition(t: Trial) -> None:
    """Black-hole one node (a network namespace per node; root): the survivors find out
    by their collective timeout, never by a reset, and recover without it. A partition
    that heals (``--duration``) before the collective timeout is a stall: training goes
    on at the same world size, nothing lost."""
    _silent(t)


@hypothesis("freeze", "hung node: every process of one node stopped at once; sockets stay open",
            fault="freeze", defaults={"pg_timeout_s": SILENT_PG_TIMEOUT_S})
def freeze(t: Trial) -> None:
    """Freeze every process of one node at once (cgroup freezer, or SIGSTOP without
    root): the survivors find out by their collective timeout and recover without it.
    A freeze that thaws (``--duration``) before the collective timeout is a stall:
    training goes on at the same world size, nothing lost."""
    _silent(t)


@dataclass(frozen=True)
class SpotTiming(FinalStateOptions):
    aws_timing: bool = option(False, "AWS's real timing: rebalance 10 s before a 2-minute notice, 30 s grace "
                                     "(overrides --notice, --grace, --rebalance-lead)")

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("spot-interruption", "AWS spot reclaim: rebalance recommendation, notice, SIGTERM after the "
                                 "notice, SIGKILL after the grace period",
            fault="spot-interruption", params=SpotTiming)
def spot_interruption(t: Trial) -> None:
    """The AWS sequence; the reference trainer checkpoints on the notice (and on SIGTERM),
    so a graceful interruption loses nothing, and the node leaves within its grace."""
    fault = t.fault(**AWS_TIMING) if t.params.aws_timing and t.settings.fault_class is SpotInterruption \
        else t.fault()
    # the local stand-in may send no rebalance recommendation; AWS FIS always sends one
    rebalance = not isinstance(fault, SpotInterruption) or fault.rebalance_lead_s is not None
    trains_on = (fault.rebalance_lead_s or 0.0) + fault.notice_s if isinstance(fault, SpotInterruption) else 0.0
    t.start(prepare(t, t.params, fault_s=trains_on))   # the job trains on through the notice
    t.steady(checkpoint_bound=False)    # the bound is the save on the notice, not the interval
    record = t.inject(fault)
    rec = t.recover(record)
    events = t.run.timeline.events()
    t.check_recovered(rec, lost_at_most=0)
    noticed = [e for e in events if e.type == ProgressEv.NOTICE and e.node == record.target]
    if t.job.script:
        _script_saved_in_time(t, record, events, noticed)
    else:
        _trainer_noticed(t, record, rec, events, noticed, rebalance)
    t.verdict.require(record.hit is not None and record.hit.action == "sigterm",
                      f"the node left within its {record.detail.get('grace_s', '?')}s grace period "
                      f"({record.hit.action if record.hit else 'no hit'})", check="graceful")
    check_final_state(t, t.params)


def _trainer_noticed(t: Trial, record: FaultRecord, rec: Recovery, events: list[Event], noticed: list[Event],
                     rebalance: bool) -> None:
    """The reference trainer saw the notices and saved on the earliest and on SIGTERM. Where its agent acted
    on the interruption notice (--leave-on-notice: ``rec.notice_lead_s``) it sent the trainer SIGTERM then,
    maybe before the trainer's own next poll: the trainer need not have seen that notice, and its SIGTERM
    save is the save on it."""
    agent_acted = rec.notice_lead_s is not None
    expected = {"interruption"} | ({"rebalance"} if rebalance else set())
    seen = {str(e.data.notice or field_value(e.data, "kind")) for e in noticed}
    agent_first = agent_acted and "interruption" not in seen
    acted = (f"; its agent acted on the interruption notice first and stopped it, {rec.notice_lead_s:.1f} s before "
             "the termination (--leave-on-notice)") if agent_first else ""
    t.verdict.require(seen == (expected - {"interruption"} if agent_first else expected),
                      f"the trainer on {record.target} observed the notices ({', '.join(sorted(seen)) or 'none'})"
                      f"{acted}", check="noticed")
    reasons = {str(e.data.reason) for e in events if e.type == CheckpointEv.SAVED}
    # on the earliest notice seen: the rebalance recommendation, or the interruption notice
    # when one poll of the metadata service found both (or its agent acted on it: the SIGTERM save)
    on_notice = {"spot-rebalance", "spot-interruption"} if rebalance else {"spot-interruption"}
    taken = ", ".join(sorted(reasons & (on_notice | {"sigterm"}))) or "none"
    by_agent = not rebalance and agent_acted
    t.verdict.require("sigterm" in reasons and (by_agent or bool(reasons & on_notice)),
                      f"emergency checkpoints taken ({taken}; wanted sigterm and one on the "
                      f"{'rebalance recommendation' if rebalance else 'notice'}"
                      f"{': the SIGTERM its agent sent on the notice' if by_agent else ''})", check="emergency-save")


def _script_saved_in_time(t: Trial, record: FaultRecord, events: list[Event], noticed: list[Event]) -> None:
    """A user's script need not read spot notices; what counts is that it saved
    before it went (on the notice, or on SIGTERM): a checkpoint between the first warning
    and the node's end (its processes exited, or SIGKILL came), not one made after the restart."""
    warned = float(record.detail.get("rebalance_at") or record.detail.get("notice_at") or record.injected_at)
    gone = record.hit.ended_at() if record.hit is not None else record.injected_at
    saved = saves(events, after=warned, until=gone)
    if noticed:
        t.verdict.require(True, f"the script on {record.target} observed the notice", check="noticed")
    else:
        t.verdict.skip(f"whether the script on {record.target} saw the notice (it reports none; only saving "
                       "before the node goes matters here)", check="noticed")
    hint = "" if saved or t.job.observe.checkpoint else " (pass --checkpoint PATH so the script's saves are seen)"
    window = f"+{warned - record.injected_at:.1f} s .. +{gone - record.injected_at:.1f} s from SIGTERM"
    t.verdict.require(bool(saved), f"a checkpoint was saved between the first warning and {record.target}'s end "
                                   f"({window}): {len(saved)} save(s) in that window{hint}", check="emergency-save")


@dataclass(frozen=True)
class OutageWhen:
    during_rendezvous: bool = option(False, "hit while the survivors re-form after a node kill (a cascade), "
                                            "not during steady training")

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("etcd-outage", "the rendezvous store is down for N seconds (--during-rendezvous: while survivors "
                           "re-form after a kill), then returns with its data", fault="etcd-outage", params=OutageWhen)
def etcd_outage(t: Trial) -> None:
    """etcd is down (crashed or hung) for ``--duration``. Hypothesis: steady training
    rides it out without a restart; with ``--during-rendezvous`` the outage hits the
    survivors re-forming after a node kill, and they complete the rendezvous once etcd
    is back. (torch 2.13: a crashed etcd takes every agent down, even in steady state;
    a hung one is waited out.)"""
    outage = t.fault()
    assert isinstance(outage, EtcdOutage)
    t.start()
    t.steady()
    if t.params.during_rendezvous:
        armed = t.run.arm(outage, during_rendezvous())
        kill = t.inject(KillNode(node=t.opts.target))
        store = armed.wait(timeout=t.opts.timeout_s)
        rec = t.recover(kill, extra_s=outage.duration_s or 0.0)
        t.check_recovered(rec)
        hung = (store.injected_at - kill.injected_at) + 0.9 * (outage.duration_s or 0.0)
        t.verdict.require(rec.rendezvous_s is not None and rec.rendezvous_s >= hung,
                          f"the rendezvous completed only once etcd was back ({seconds(rec.rendezvous_s)} >= "
                          f"{hung:.1f}s)", check="waited-for-store")
        if not t.replaces_nodes:
            t.verdict.require(rec.world_size_after == (rec.world_size_before or 0) - t.job.nproc_per_node,
                              f"world size {rec.world_size_before} -> {rec.world_size_after}", check="world-size")
        return
    store = t.inject(outage)
    steps = int((outage.duration_s or 10.0) / max(t.job.step_time, 0.01))
    t.run.wait_for_steps(max(steps, 120), timeout=t.opts.timeout_s)
    rec = t.run.recovery(store)
    t.verdict.require(rec.restarts_used == 0, f"training rode out the outage without a restart "
                                              f"(restarts used: {rec.restarts_used})", check="rode-out")
    t.verdict.require(bool(t.run.timeline.select(RunnerEv.STORE_STARTED)), "etcd came back with its data",
                      check="store-back")
