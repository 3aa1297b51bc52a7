"""Sharded saves broken on the volume: one shard of the newest complete DCP save deleted or truncated,
then a restart that meets it.

A DCP save counts as complete once its ``.metadata`` is written; a shard lost after that leaves a
folder that still looks complete. The job must resume from the newest save it can load whole (the
one before) or fail loudly: training on from what is left of the damaged save would be a resume
from a partial checkpoint. The reference trainer's DCP restore tries the save ``latest`` names,
reports one that does not load (``checkpoint_corrupt``) and tries the next older complete one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_chaos.errors import RecoveryTimeout
from elastic_chaos.events import CheckpointEv
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.node import WorkerCrash
from elastic_chaos.faults.triggers import checkpoint_saved
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.hypotheses.corruption import check_aim
from elastic_chaos.runner.endings import JobFailed

CHECK = "newest-whole-save"


@hypothesis("damage-shard", "a sharded save broken on the volume: one rank's shard of the newest complete DCP save "
                            "deleted or truncated, then a worker crash makes the job restart; it must resume from "
                            "the newest save it can load whole (or fail loudly), never from the damaged one",
            fault="damage-shard", forced={"checkpoint_format": "dcp"})
def damage_shard(t: Trial) -> None:
    """The moment a DCP save past the steady step is complete, delete or truncate one of its shards, then
    crash a worker so the job restarts and loads its newest save. Hypothesis: it does not train on from
    the damaged save; it resumes from the newest intact one (the save before: up to two checkpoint
    intervals lost) or fails loudly, and the verdict names the step it resumed from."""
    t.start()
    t.steady()
    record = t.run.arm(t.fault(), checkpoint_saved(min_step=t.steady_steps)).wait(timeout=t.opts.timeout_s)
    crash = t.inject(WorkerCrash(node=t.opts.target))
    try:
        rec = t.recover(crash)
    except (JobFailed, RecoveryTimeout) as exc:   # loud: judged here, then the run ends as it would
        t.verdict.require(*judge(record.detail, None, _loads(t, record), _unloadable(t, record), failed=str(exc)),
                          check=CHECK)
        raise
    t.check_recovered(rec, lost_at_most=2 * t.job.checkpoint_every)
    check_aim(t, record, crash, "the damaged save", "damage")
    t.verdict.require(*judge(record.detail, rec.resumed_from_step, _loads(t, record), _unloadable(t, record)),
                      check=CHECK)


def _loads(t: Trial, record: FaultRecord) -> list[int]:
    """The steps the job loaded after the damage (every rank's, in time order)."""
    return [e.data.step for e in t.run.timeline.select(CheckpointEv.LOADED, after=record.injected_at)
            if e.data.step is not None]


def _unloadable(t: Trial, record: FaultRecord) -> str | None:
    """Why the job said the damaged save did not load (its first ``checkpoint/corrupt`` for that folder)."""
    name = Path(str(record.detail.get("folder"))).name
    said = [e for e in t.run.timeline.select(CheckpointEv.CORRUPT, after=record.injected_at)
            if e.data.path and Path(str(e.data.path)).name == name]
    return said[0].data.reason if said else None


def judge(detail: dict[str, Any], resumed: int | None, loads: list[int], unloadable: str | None, *,
          failed: str | None = None) -> tuple[bool, str]:
    """Whether the job kept clear of the damaged save, and the sentence that says which happened: the step
    it resumed from against the newest intact save on the volume when the shard was damaged (the fault's
    ``detail``), or its loud failure. ``loads``: every step loaded after the damage; ``unloadable``: the
    job's reason the damaged save did not load (None: it did not say); ``failed``: why the run stopped
    waiting for a resume (the job failed, or time ran out)."""
    damaged, intact = detail.get("step"), detail.get("newest_intact_step")
    hit = (f"rank {detail.get('rank')}'s shard of step {damaged}'s save "
           + ("deleted" if detail.get("action") == "delete" else f"truncated to {detail.get('size_after')} of "
                                                                f"{detail.get('size_before')} bytes"))
    said = f" (it reported the save unloadable: {unloadable})" if unloadable else " (unreported)"
    whole = "none: a fresh start is the only whole state" if intact is None else f"step {intact}"
    if damaged is not None and int(damaged) in loads:
        return False, (f"the job loaded step {damaged}, the damaged save ({hit}), and trained on from a partial "
                       f"checkpoint; the newest intact save was {whole}")
    if failed is not None:
        return True, (f"the job failed loudly after {hit}{said} rather than train on from the damaged save: "
                      f"{failed}; it never loaded it (the newest intact save: {whole})")
    if resumed is None:
        return False, f"the job trained again after {hit} without saying which save it resumed from"
    if resumed == (intact or 0):
        return True, f"the job resumed from step {resumed}, the newest intact save ({whole}), after {hit}{said}"
    return False, (f"the job resumed from step {resumed} after {hit}{said}, not from the newest intact save "
                   f"({whole})")
