"""Hypotheses about the checkpoint volume misbehaving: slow, hung, full, failing, read-only.

Each puts the job's checkpoint folder behind the storage layer (``storage_layer`` is
forced: elastic_chaos.platforms.storage mounts it before the nodes start), reaches steady state
and sets its fault on the volume (elastic_chaos.faults.storage). What each may cost:

- ``storage-hang``: writers sleep in the kernel for the hang, the rest of the job waits
  for them in its next collective; shorter than the collective timeout, the job stalls
  about as long as the hang and trains on without a restart, losing nothing.
- ``slow-storage``: saves take longer, training goes on; with ``--interrupt-after``, a
  spot interruption lands inside the slowdown and its emergency save must still end
  inside the grace period (the storage group says by how much it did or did not).
- ``storage-full``, ``storage-errors``, ``storage-readonly``: a save fails loudly (the
  writer's worker dies, its agent restarts the group), every restart resumes from the
  newest *complete* checkpoint, never a partial one, and the job trains on once the
  volume is back.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.analysis.groups import FaultMark
from elastic_chaos.analysis.storage import StorageCost, grace_sentence, measure_storage
from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv, Event, FaultEv, ProgressEv, first, of
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.spot import SpotInterruption
from elastic_chaos.faults.storage import SlowStorage, StorageHang
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.options import DAY_S, option, validate
from elastic_chaos.watchers.storage import StorageOpWatcher

ON_LAYER = {"storage_layer": True}
"""What every storage hypothesis needs: the checkpoint folder behind the storage layer."""
SLACK_S = 5.0
"""How far past the hang the job may take to step again (its next collective, its pace)."""


def storage_cost(t: Trial, record: FaultRecord) -> StorageCost | None:
    """The storage group's value for ``record``, measured from the run's timeline so far (after the
    op log's watcher had two polls to bring in what the volume did up to now)."""
    time.sleep(2 * StorageOpWatcher.interval_s)
    until = next((r.injected_at for r in t.run.faults if r.injected_at > record.injected_at), None)
    return measure_storage(t.run.timeline.events(), FaultMark(record.fault, record.target, record.injected_at,
                                                              record.detail, until=until))


def wait_until_over(t: Trial, record: FaultRecord, duration_s: float | None) -> None:
    """Block until the fault was reverted and training stepped after it."""
    if duration_s is None:
        return
    end = record.injected_at + duration_s
    t.run.wait_for(f"training after the {record.fault} ended", lambda e: e.type == ProgressEv.STEP
                   and e.t > end and first(t.run.timeline.events(), FaultEv.REVERTED, after=record.injected_at)
                   is not None, timeout=duration_s + t.opts.timeout_s)


def stale_resumes(events: Sequence[Event], after: float) -> list[str]:
    """Every restore after ``after`` that did not load the newest checkpoint completed (the
    trainer's own ``checkpoint/saved``) before it, in words; [] when each did."""
    saved = [e for e in of(events, CheckpointEv.SAVED) if e.data.via != "file" and e.data.step is not None]
    out = []
    for load in of(events, CheckpointEv.LOADED, after=after):
        newest = max((e.data.step or 0 for e in saved if e.t < load.t), default=0)
        if (load.data.step or 0) != newest:
            out.append(f"{load.node} resumed from step {load.data.step} at +{load.t - after:.1f}s; the newest "
                       f"complete checkpoint was {newest}")
    return out


# -- the hang ------------------------------------------------------------------------------
@hypothesis("storage-hang", "hung checkpoint volume (a lost NFS server): every operation blocks for --duration "
                            "s; the job stalls about as long, then trains on without a restart",
            fault="storage-hang", forced=ON_LAYER)
def storage_hang(t: Trial) -> None:
    """Hang every operation of the checkpoint volume for ``--duration`` seconds. The next save
    sleeps in the kernel, the other ranks wait for its rank in their next collective; a hang
    shorter than the collective timeout costs a stall of about its length, no restart and no
    lost step. The verdict names the stall and what the volume held."""
    fault = t.fault()
    assert isinstance(fault, StorageHang)
    if fault.duration_s is None:
        raise SpecError("storage-hang needs --duration: the job's stall is measured against it")
    t.start()
    t.steady()
    record = t.inject(fault)
    rec = t.recover(record, extra_s=fault.duration_s)
    cost = storage_cost(t, record)
    v = t.verdict
    held = cost.stalled_s if cost is not None else None
    v.require(bool(held), f"the hang reached the job: storage held its operations {seconds(held)} in all",
              check="held")
    timeout = t.job.pg_timeout_s or 60.0
    if fault.duration_s < timeout:
        v.require(rec.restarts_used == 0 and rec.regain_s is not None
                  and rec.regain_s <= fault.duration_s + SLACK_S,
                  f"the job stalled {seconds(rec.regain_s)} on a {fault.duration_s:g}s hang (shorter than its "
                  f"{timeout:g}s collective timeout) and trained on without a restart ({rec.restarts_used} used)",
                  check="stalled")
    t.check_recovered(rec, lost_at_most=0 if fault.duration_s < timeout else None)


# -- slow, and an interruption inside it -----------------------------------------------------
@dataclass(frozen=True)
class Interruption:
    interrupt_after_s: float | None = option(None, "seconds into the slowdown at which a spot interruption "
                                                   "(notice, SIGTERM, SIGKILL after --grace) hits a node (none: "
                                                   "no interruption)", flag="--interrupt-after", minimum=0,
                                             units="s", maximum=DAY_S)
    grace_s: float = option(20.0, "the interruption's grace period: SIGTERM -> SIGKILL", flag="--grace", minimum=0,
                            units="s", maximum=DAY_S)
    notice_s: float = option(2.0, "the interruption's notice: the notice -> SIGTERM", flag="--notice", minimum=0,
                             units="s", maximum=DAY_S)
    slower_by: float = option(1.0, "how many times slower than before the fault the saves must get for the fault "
                                   "to count as felt (1: any slowdown)", minimum=1, maximum=1e6)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("slow-storage", "slow checkpoint volume: saves take longer, training goes on; with --interrupt-after, "
                            "a spot interruption inside the slowdown still saves within its grace period",
            fault="slow-storage", params=Interruption, forced=ON_LAYER)
def slow_storage(t: Trial) -> None:
    """Slow the checkpoint volume (``--latency`` per operation of ``--ops``, a ``--throughput``
    cap) for ``--duration``. Saves get slower and the job trains on. With
    ``--interrupt-after S``, a spot interruption hits a node S seconds into the slowdown: the
    node's emergency checkpoint must land inside the grace period (``--grace``): the storage
    table says how long the save took and how much grace it left."""
    fault = t.fault()
    assert isinstance(fault, SlowStorage)
    p: Interruption = t.params
    t.start()
    t.steady()
    record = t.inject(fault)
    if p.interrupt_after_s is not None:
        t.run.phase("slowed", for_s=p.interrupt_after_s)
        time.sleep(max(0.0, record.injected_at + p.interrupt_after_s - time.time()))
        spot = t.inject(SpotInterruption(node=t.opts.target, rebalance_lead_s=None, notice_s=p.notice_s,
                                         grace_s=p.grace_s))
        _check_grace(t, spot)
        rec = t.recover(spot)
    else:
        t.run.wait_for_steps(2 * t.job.checkpoint_every, timeout=t.opts.timeout_s + (fault.duration_s or 0.0))
        rec = t.run.recovery(record)
    cost = storage_cost(t, record)
    slower = cost is not None and cost.save_p50_s is not None and cost.save_before_s is not None \
        and cost.save_p50_s >= p.slower_by * cost.save_before_s and cost.save_p50_s > cost.save_before_s
    t.verdict.require(slower, "saves got slower on the slow volume: "
                      + (cost.describe() if cost is not None else "no save was seen through the storage layer"),
                      check="slower")
    if p.interrupt_after_s is not None:
        t.check_recovered(rec)


def _check_grace(t: Trial, spot: FaultRecord) -> None:
    """The interrupted node's last save ended inside its grace period."""
    cost = storage_cost(t, spot)
    if cost is None or cost.grace_s is None:
        t.verdict.fail(f"no grace period was measured for {spot.target}", check="saved-in-grace")
        return
    why = [m for m in cost.missing if m.startswith(f"{spot.target} ") or m.startswith(f"{spot.target}'s ")]
    t.verdict.require(cost.saved_in_time is True, f"{spot.target}'s emergency checkpoint beat its grace period: "
                      + "; ".join([grace_sentence(cost), *why]), check="saved-in-grace")


# -- failing saves --------------------------------------------------------------------------
def failing_saves(t: Trial, errno_name: str) -> None:
    """A save meets the fault and fails with ``errno_name``; every restart resumes from the newest
    complete checkpoint; the job trains on once the volume is back."""
    t.start()
    t.steady()
    record = t.inject()
    rec = t.recover(record, extra_s=float(record.detail.get("duration_s") or 0.0))
    cost = storage_cost(t, record)
    v = t.verdict
    failed = cost.errors.get(errno_name, 0) if cost is not None else 0
    # measured when the job had recovered: the report's storage table counts on to the run's end
    v.require(failed >= 1, f"a save met the fault and failed with {errno_name} ({failed} did; up to the recovery: "
              + (cost.describe() if cost is not None else "no save was seen through the storage layer") + ")",
              check="save-failed")
    stale = stale_resumes(t.run.timeline.events(), record.injected_at)
    loads = len(t.run.timeline.select(CheckpointEv.LOADED, after=record.injected_at))
    v.require(not stale, f"every restart ({loads} restores) resumed from the newest complete checkpoint, never a "
              f"partial one" + (": " + "; ".join(stale) if stale else ""), check="newest-complete")
    corrupt = t.run.timeline.select(CheckpointEv.CORRUPT)
    v.require(not corrupt, f"no restart met a corrupt checkpoint ({len(corrupt)} reported)", check="no-corrupt")
    t.check_recovered(rec)


@hypothesis("storage-full", "full checkpoint volume: a save fails with ENOSPC, the job restarts from the newest "
                            "complete checkpoint and trains on once space is back",
            fault="storage-full", forced=ON_LAYER)
def storage_full(t: Trial) -> None:
    """The volume fills up (at once, or after ``--after-mb``): the next save fails with ENOSPC
    mid-file, its worker dies and its agent restarts the group; every restart resumes from the
    newest complete checkpoint (the partial file is never loaded), and once space is back
    (``--duration``) the job trains past where it was."""
    failing_saves(t, "ENOSPC")


@hypothesis("storage-errors", "failing checkpoint volume: EIO on a count or a fraction of its operations; a "
                              "failed save restarts the job from the newest complete checkpoint",
            fault="storage-errors", forced=ON_LAYER)
def storage_errors(t: Trial) -> None:
    """The volume fails ``--count`` operations (or a ``--fraction``) of ``--ops`` with EIO: the
    save that meets one fails, its worker dies and its agent restarts the group; every restart
    resumes from the newest complete checkpoint and the job trains on."""
    failing_saves(t, str(t.settings.fault.get("errno", "EIO")))


@hypothesis("storage-readonly", "read-only checkpoint volume: saves fail with EROFS; the job restarts from the "
                                "newest complete checkpoint and trains on once it is writable",
            fault="storage-readonly", forced=ON_LAYER)
def storage_readonly(t: Trial) -> None:
    """The volume turns read-only for ``--duration`` (a remount after an error): the next save
    fails with EROFS at its create, its worker dies and its agent restarts the group; every
    restart resumes from the newest complete checkpoint and, writable again, the job trains on."""
    failing_saves(t, "EROFS")
