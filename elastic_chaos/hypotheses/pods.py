"""Hypotheses only a cluster has: a pod deleted (at once or gracefully), a node drained.

The job's controller (a StatefulSet, ElasticJob or PyTorchJob) re-creates a
deleted worker pod under its name, so each of these ends with the world back
at full size; what differs is what the pod could do on its way out: nothing
(grace 0), or checkpoint on SIGTERM (graceful delete, eviction by a drain).
"""
from __future__ import annotations

from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.events import CheckpointEv
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds


@hypothesis("delete-pod", "a worker pod deleted with grace 0 (force): gone at once, re-created by its controller",
            fault="delete-pod")
def delete_pod(t: Trial) -> None:
    """Force-delete the newest worker pod: no SIGTERM handler runs. Training resumes, losing
    at most one checkpoint interval, and the controller's new pod (same name) brings the
    world back to full size."""
    t.start()
    t.steady()
    record = t.inject()
    t.recover(record)
    _recreated(t, record)


@hypothesis("delete-pod-graceful", "a worker pod deleted gracefully: SIGTERM, the trainer checkpoints on its way "
                                   "out, the controller re-creates the pod", fault="delete-pod-graceful")
def delete_pod_graceful(t: Trial) -> None:
    """Delete the newest worker pod with a grace period, as ``kubectl delete pod`` does: the
    trainer saves on SIGTERM, so nothing is lost, and the pod is gone within its grace."""
    t.start()
    t.steady(checkpoint_bound=False)    # the bound is the save on SIGTERM, not the interval
    record = t.inject()
    t.recover(record)
    hit = record.hit.detail if record.hit else {}
    t.verdict.require(hit.get("gone") is True, f"the pod was gone within its {hit.get('grace_s')}s grace (+30s)",
                      check="graceful")
    _saved_on_sigterm(t, record)
    _recreated(t, record, lost_at_most=0)


@hypothesis("drain-node", "kubectl drain of the node under a worker: cordon, evict; the worker checkpoints and "
                          "its pod is re-created on another node", fault="drain-node")
def drain_node(t: Trial) -> None:
    """Drain the machine under the newest worker (what a node-termination handler does): the
    evicted trainer saves on SIGTERM, its pod comes back on another machine (the drained one
    is cordoned), and the world is full again without losing a step."""
    t.start()
    t.steady(checkpoint_bound=False)    # the bound is the save on SIGTERM, not the interval
    record = t.inject()
    t.recover(record)
    _saved_on_sigterm(t, record)
    rec = _recreated(t, record, lost_at_most=0)
    drained = record.detail.get("machine")
    now = next((n for n in t.run.platform.alive_nodes() if n.name == record.target), None)
    moved = now.labels.get("machine") if now else None
    t.verdict.require(moved is not None and moved != drained,
                      f"the re-created pod runs on {moved}, not on the drained {drained} "
                      f"(rejoined {seconds(rec.replacement_s)} after the drain)", check="moved")


def _recreated(t: Trial, record: FaultRecord, *, lost_at_most: int | None = None) -> Recovery:
    """The controller's new pod joined: full world again, at most ``lost_at_most`` steps lost."""
    rec = t.regrow(record)
    t.check_recovered(rec, lost_at_most=lost_at_most)
    t.verdict.require(rec.replacement_s is not None and rec.world_size_final == t.full_world,
                      f"the controller re-created {record.target}: it joined {seconds(rec.replacement_s)} after "
                      f"the fault, world size back to {rec.world_size_final} of {t.full_world}", check="re-created")
    return rec


def _saved_on_sigterm(t: Trial, record: FaultRecord) -> None:
    saves = [e for e in t.run.timeline.select(CheckpointEv.SAVED, node=record.target, after=record.injected_at)
             if e.data.reason == "sigterm"]
    if t.job.script:
        t.verdict.skip(f"whether the script on {record.target} saved on SIGTERM (only the reference trainer says "
                       "why it saves)", check="emergency-save")
        return
    t.verdict.require(bool(saves), f"the trainer on {record.target} saved a checkpoint on SIGTERM "
                                   f"({'step ' + str(saves[0].data.step) if saves else 'none'})",
                      check="emergency-save")
