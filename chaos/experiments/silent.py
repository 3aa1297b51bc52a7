"""Experiments where a node goes silent, a notice comes first, or the store blinks."""
from __future__ import annotations

from chaos.events import Event
from chaos.experiments.common import ExperimentOptions, check_recovered, open_run, seconds
from chaos.faults import EtcdOutage, Freeze, KillNode, Partition, SpotInterruption
from chaos.faults.api import Fault, FaultRecord
from chaos.faults.triggers import during_rendezvous
from chaos.platforms.api import StoreOutage
from chaos.runner.run import ChaosRun, Verdict
from chaos.spec import JobSpec

SILENT_PG_TIMEOUT_S = 15.0


def _silent(opts: ExperimentOptions, fault: Fault, scenario: str, **local: object) -> ChaosRun:
    """A node goes silent (no resets): survivors must find out by timeouts."""
    pg_timeout = opts.pg_timeout_s or SILENT_PG_TIMEOUT_S
    job = opts.job(trainer_args=(*opts.job().trainer_args, "--pg-timeout", str(pg_timeout)))
    with open_run(opts, scenario, **local) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        record = run.inject(fault)
        rec = run.wait_for_recovery(record, timeout=opts.timeout_s + pg_timeout)
        errors = [e for e in run.timeline.events() if e.source == "progress" and e.kind == "worker_error"
                  and e.t > record.injected_at and e.node != record.target]
        causes = sorted({str(e.data.get("cause")) for e in errors})
        v = Verdict()
        check_recovered(v, rec, job)
        v.require("timeout" in causes and "connection_closed" not in causes,
                  f"survivors found out by a timeout, not a closed connection (collective errors: {causes})")
        v.require(rec.detect_s is not None and rec.detect_s >= 0.5 * pg_timeout,
                  f"detection took {seconds(rec.detect_s)}, driven by the {pg_timeout:g}s collective timeout")
        run.verdict = v
    return run


def partition(opts: ExperimentOptions, *, scenario: str = "partition") -> ChaosRun:
    """Black-hole one node (own network namespace per node; root)."""
    return _silent(opts, Partition(node=opts.target, duration_s=opts.duration_s), scenario,
                   network=_isolated())


def freeze(opts: ExperimentOptions, *, scenario: str = "freeze") -> ChaosRun:
    """Freeze every process of one node at once (cgroup freezer, or SIGSTOP without root)."""
    return _silent(opts, Freeze(node=opts.target, duration_s=opts.duration_s), scenario)


def _isolated() -> object:
    from chaos.platforms.local.platform import NetworkMode
    return NetworkMode.ISOLATED


def spot_interruption(opts: ExperimentOptions, *, scenario: str = "spot-interruption") -> ChaosRun:
    """The AWS sequence; the reference trainer checkpoints on the notice (and on
    SIGTERM), so a graceful interruption loses nothing."""
    job = opts.job()
    fault = SpotInterruption(node=opts.target, rebalance_lead_s=opts.rebalance_lead_s,
                             notice_s=opts.notice_s, grace_s=opts.grace_s)
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        record = run.inject(fault)
        rec = run.wait_for_recovery(record, timeout=opts.timeout_s)
        events = run.timeline.events()
        noticed = [e for e in events if e.source == "progress" and e.kind == "notice" and e.node == record.target]
        emergency = [e for e in events if e.source == "checkpoint" and e.kind == "saved"
                     and str(e.data.get("reason", "")).startswith(("spot-", "sigterm"))]
        v = Verdict()
        check_recovered(v, rec, job, lost_at_most=0)
        if job.script:
            _script_saved_in_time(v, job, record, events, noticed)
        else:
            v.require(bool(noticed), f"the trainer on {record.target} observed the notice "
                                     f"({', '.join(str(e.data.get('kind')) for e in noticed) or 'none'})")
            v.require(bool(emergency), f"an emergency checkpoint was saved ({len(emergency)})")
        v.require(record.hit is not None and record.hit.action == "sigterm",
                  f"the node left within the {opts.grace_s:g}s grace period "
                  f"({record.hit.action if record.hit else 'no hit'})")
        run.verdict = v
    return run


def _script_saved_in_time(v: Verdict, job: JobSpec, record: FaultRecord, events: list[Event],
                          noticed: list[Event]) -> None:
    """A user's script need not read spot notices; what counts is that it saved
    before it went (on the notice, or on SIGTERM): a checkpoint after the first warning."""
    warned = float(record.detail.get("rebalance_at") or record.detail.get("notice_at") or record.injected_at)
    saves = [e for e in events if e.source == "checkpoint" and e.kind == "saved" and e.t >= warned]
    if noticed:
        v.require(True, f"the script on {record.target} observed the notice")
    else:
        v.reasons.append(f"not checked: whether the script on {record.target} saw the notice (it reports "
                         "none; only saving before the node goes matters here)")
    hint = "" if saves or job.observe.checkpoint else " (pass --checkpoint PATH so the script's saves are seen)"
    v.require(bool(saves), f"a checkpoint was saved between the first warning and the node's end "
                           f"({len(saves)}){hint}")


def etcd_outage(opts: ExperimentOptions, *, scenario: str = "etcd-outage") -> ChaosRun:
    """etcd is down (crashed or hung) for ``duration_s``. Hypothesis: steady
    training rides it out without a restart; with ``during_rendezvous`` the
    outage hits survivors re-forming after a node kill, and they complete the
    rendezvous once etcd is back. (torch 2.13: a crashed etcd takes every
    agent down, even in steady state; a hung one is waited out.)"""
    job = opts.job()
    outage = EtcdOutage(duration_s=opts.duration_s if opts.duration_s is not None else 10.0,
                        how=StoreOutage(opts.store_outage))
    with open_run(opts, scenario) as run:
        run.start(job)
        run.wait_for_step(opts.steady_steps, timeout=opts.timeout_s)
        v = Verdict()
        if opts.during_rendezvous:
            armed = run.arm(outage, during_rendezvous())
            kill = run.inject(KillNode(node=opts.target))
            store = armed.wait(timeout=opts.timeout_s)
            rec = run.wait_for_recovery(kill, timeout=opts.timeout_s + (outage.duration_s or 0))
            check_recovered(v, rec, job)
            v.require(rec.rendezvous_s is not None and rec.rendezvous_s >= store.injected_at - kill.injected_at,
                      f"the rendezvous completed after the outage began ({seconds(rec.rendezvous_s)})")
        else:
            store = run.inject(outage)
            run.wait_for_steps(int((outage.duration_s or 10) / job.step_time), timeout=opts.timeout_s)
            rec = run.recovery(store)
            v.require(rec.restarts_used == 0, f"training rode out the outage without a restart "
                                              f"(restarts used: {rec.restarts_used})")
            v.require(any(e.source == "runner" and e.kind == "store_started" for e in run.timeline.events()),
                      "etcd came back with its data")
        run.verdict = v
    return run
