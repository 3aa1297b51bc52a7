"""Advice about the checkpoint volume, from what this run's storage layer measured
(elastic_chaos.analysis.storage; the rule of elastic_chaos.analysis.advice.rendezvous: this run's figures, never tips).

- the grace period: a node told to go (a spot interruption, a graceful kill, a pod
  deletion) had ``grace_s`` to save and its last save took longer, or ended with too
  little to spare (under ``MARGIN`` of the grace period): the gap, and what closes it
  (a longer terminationGracePeriodSeconds, an asynchronous save, more frequent saves;
  torchrun's own agent SIGKILLs its workers 30 s after it forwards SIGTERM, whatever
  the pod's grace period);
- slow saves: saves took ``SLOWER`` times their time before the fault and the job
  stalled on storage: a synchronous save blocks every rank for as long;
- failed saves: saves failed with an errno from the volume (ENOSPC, EIO, EROFS) and each
  one cost the job a restart.
"""
from __future__ import annotations

from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.storage import STORAGE, StorageCost
from elastic_chaos.torch_defaults import AGENT_SHUTDOWN_WAIT_S

MARGIN = 0.2
"""A save that leaves less than this share of the grace period is called too close."""
SLOWER = 3.0
"""Saves this many times slower than before the fault are worth a finding."""


def storage_findings(i: int, fault: FaultResult) -> list[Finding]:
    """The findings about the checkpoint volume for fault ``i`` (none without a storage layer)."""
    cost = fault.group(STORAGE)
    if cost is None:
        return []
    slow = cost.save_before_s is not None and cost.save_max_s is not None \
        and cost.save_max_s >= SLOWER * max(cost.save_before_s, 0.01)
    out = [f for f in (_grace(i, fault, cost, slow), _slow(i, cost, slow), _failed(i, fault, cost)) if f]
    return out


def _grace(i: int, fault: FaultResult, cost: StorageCost, slow: bool) -> Finding | None:
    if cost.grace_s is None:
        return None
    if cost.last_save_s is None:
        return _no_save(i, fault, cost) if cost.saved_in_time is False else None
    left = cost.grace_left_s
    if cost.saved_in_time and left is not None and left >= MARGIN * cost.grace_s:
        return None
    on = " on slow storage" if slow else ""
    how = (f"it ended {left:.1f} s before the SIGKILL" if cost.saved_in_time and left is not None
           else "it did not end before the SIGKILL")
    cap = (f"; torchrun's agent SIGKILLs its workers {AGENT_SHUTDOWN_WAIT_S:g} s after SIGTERM whatever the grace "
           "period" if cost.grace_s > AGENT_SHUTDOWN_WAIT_S else "")
    text = (f"{fault.target}'s save took {cost.last_save_s:.0f} s{on}; the grace period is {cost.grace_s:.0f} s "
            f"({how}): raise terminationGracePeriodSeconds (--grace, the pod's), save asynchronously, or save "
            f"more often so that less is lost when the save does not make it{cap}.")
    overrun = cost.last_save_s - (cost.grace_s - (left or 0.0) if cost.saved_in_time else cost.grace_s)
    return Finding(i, "grace", "terminationGracePeriodSeconds", max(overrun, cost.last_save_s), text)


def _slow(i: int, cost: StorageCost, slow: bool) -> Finding | None:
    if not slow or cost.save_max_s is None or cost.save_before_s is None:
        return None
    text = (f"saves took up to {cost.save_max_s:.1f} s (p50 {cost.save_p50_s or 0:.1f} s) against "
            f"{cost.save_before_s:.2f} s before the fault, and the job stalled {cost.stalled_s or 0:.1f} s on "
            "storage: a synchronous save holds every rank for as long; save asynchronously "
            "(torch.distributed.checkpoint.async_save) or to a local disk first and copy it out.")
    return Finding(i, "save", "checkpoint_every", cost.save_max_s, text)


def _failed(i: int, fault: FaultResult, cost: StorageCost) -> Finding | None:
    if not cost.failed_saves:
        return None
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(cost.errors.items()) if k != "EINTR")
    restarts = fault.recovery.restarts_used
    text = (f"{cost.failed_saves} save(s) failed on the volume ({kinds}) and the job restarted "
            f"{restarts if restarts is not None else '?'} time(s): each failed save killed its worker. Keep fewer "
            "checkpoints (or watch the volume's free space), and let a failed save be retried or skipped instead of "
            "ending the process, so a full or flaky volume costs a checkpoint, not a restart.")
    return Finding(i, "save", None, float(restarts or 0), text)


def _no_save(i: int, fault: FaultResult, cost: StorageCost) -> Finding:
    """The node told to go began no save at all in its grace period (its workers were held)."""
    held = next((m for m in cost.missing if "last training step came" in m), None)
    why = f" ({held.split('(', 1)[1]}" if held and "(" in held else ""
    longest = (f"; the job's saves took up to {cost.save_max_s:.0f} s meanwhile" if cost.save_max_s else "")
    text = (f"{fault.target} began no save in its {cost.grace_s:.0f} s grace period{why}{longest}: a rank held by "
            "another rank's slow save cannot save its own state. Raise terminationGracePeriodSeconds (--grace, the "
            "pod's) above the longest save, save asynchronously so that no rank waits on the volume, or save more "
            "often.")
    return Finding(i, "grace", "terminationGracePeriodSeconds", cost.grace_s or 0.0, text)
