"""The grace period in every phase: a spot interruption (notice, SIGTERM, SIGKILL after the grace
period) delivered before the first step, in steady training, during a save or during a
re-rendezvous, on a fast or a slow checkpoint volume.

A node told to go has its grace period to save; the reference trainer saves on the notice
and on SIGTERM (elastic_chaos/trainer/train.py), a user's script is measured as it is. Where the node had
workers training when it was told (steady, during a save), its emergency checkpoint must
end inside the grace period; where it had none (before the first step, while its agent
re-forms the rendezvous), there is nothing of its own to save and the steps lost say what
the interruption cost. The storage group (elastic_chaos.analysis.storage) measures the last save
against the grace left; bench/grace.py runs the grid phase x storage condition.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, replace

from elastic_chaos.analysis.storage import grace_sentence
from elastic_chaos.events import CheckpointEv, Event, first
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.node import KillNode
from elastic_chaos.faults.storage import SlowStorage
from elastic_chaos.faults.triggers import during_rendezvous
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.hypotheses.storage import ON_LAYER, storage_cost
from elastic_chaos.options import option, validate


class Phase(str, enum.Enum):
    """When the interruption hits."""

    BEFORE_FIRST_STEP = "before-first-step"
    STEADY = "steady"
    DURING_SAVE = "during-save"
    DURING_RENDEZVOUS = "during-rendezvous"

    @property
    def trains(self) -> bool:
        """Whether the interrupted node has workers training when it is told to go."""
        return self in (Phase.STEADY, Phase.DURING_SAVE)


@dataclass(frozen=True)
class GracePhase:
    phase: Phase = option(Phase.STEADY, "when the interruption hits the node")
    save_latency_s: float | None = option(None, "a slow volume while it hits: seconds each write, fsync, rename "
                                                "and open of the checkpoint volume waits (none: as it is)",
                                          flag="--save-latency", minimum=0, units="s", maximum=3600.0)
    save_delay_s: float = option(3.0, "during-save: the reference trainer's pause inside each periodic save "
                                      "(its --save-delay), so the SIGTERM lands while it writes", flag="--save-delay",
                                 minimum=0, units="s", maximum=3600.0)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("grace-period", "a spot interruption in one phase of a run (before the first step, steady, during a "
                            "save, during a re-rendezvous), on a fast or slow volume: the node's emergency "
                            "checkpoint lands inside the grace period",
            fault="spot-interruption", params=GracePhase, forced=ON_LAYER,
            defaults={"rebalance_lead_s": None, "notice_s": 2.0})
def grace_period(t: Trial) -> None:
    """Interrupt one node (notice, SIGTERM after ``--notice``, SIGKILL after ``--grace``) in
    ``--phase``, the volume slowed by ``--save-latency`` when given. A node with workers training
    (steady, during a save) saves inside its grace period; one without (before the first step,
    re-forming the rendezvous) has nothing of its own to save. Either way the job recovers,
    losing at most one checkpoint interval."""
    p: GracePhase = t.params
    job = t.job
    if p.phase is Phase.DURING_SAVE and not job.script and p.save_delay_s:
        job = replace(job, trainer_args=(*job.trainer_args, "--save-delay", f"{p.save_delay_s:g}"))
    t.start(job)
    if p.phase is not Phase.BEFORE_FIRST_STEP:
        t.steady()
    if p.save_latency_s:
        t.inject(SlowStorage(latency_s=p.save_latency_s, duration_s=None))
    spot = _interrupt(t, p.phase)
    _check(t, p, spot)


def _interrupt(t: Trial, phase: Phase) -> FaultRecord:
    """Deliver the interruption in ``phase``; its record (``injected_at``: the SIGTERM)."""
    if phase is Phase.BEFORE_FIRST_STEP:
        return t.inject(t.fault(notice_s=0.0))
    if phase is Phase.STEADY:
        return t.inject()
    if phase is Phase.DURING_SAVE:
        now = time.time()
        began = t.run.wait_for("a periodic save", lambda e: e.type == CheckpointEv.STARTED and e.t > now
                               and (e.data.reason or "periodic") == "periodic", timeout=t.opts.timeout_s)
        record = t.inject(t.fault(node=began.node, notice_s=0.0))
        saved = first(t.run.timeline.events(), CheckpointEv.SAVED, node=began.node, after=began.t,
                      where=lambda e: e.data.step == began.data.step)
        t.verdict.require(saved is None or saved.t > record.injected_at,
                          f"the SIGTERM hit {began.node} while it saved step {began.data.step} "
                          f"({record.injected_at - began.t:.2f}s into the save)", check="aim")
        return record
    first_loss = t.inject(KillNode(node=t.opts.target))
    armed = t.run.arm(t.fault(notice_s=0.0), during_rendezvous(after=first_loss.injected_at))
    record = armed.wait(timeout=t.opts.timeout_s)
    t.verdict.require(record.target != first_loss.target, f"the interruption hit {record.target} as it re-formed "
                      f"the rendezvous after {first_loss.target} was lost", check="aim")
    return record


def _check(t: Trial, p: GracePhase, spot: FaultRecord) -> None:
    cost = storage_cost(t, spot)
    v = t.verdict
    storage = f" on a volume slowed by {p.save_latency_s:g}s per operation" if p.save_latency_s else ""
    if cost is None or cost.grace_s is None:
        v.fail(f"no grace period was measured for {spot.target}", check="saved-in-grace")
    elif p.phase.trains:
        why = [m for m in cost.missing if m.startswith(str(spot.target))]
        v.require(cost.saved_in_time is True, f"{p.phase.value}{storage}: {spot.target}'s emergency checkpoint "
                  f"landed inside its grace period: " + "; ".join([grace_sentence(cost), *why]),
                  check="saved-in-grace")
    else:
        v.skip(f"{p.phase.value}{storage}: {spot.target} had no worker training when it was told to go: nothing "
               f"of its own to save ({_last_save_words(t.run.timeline.events(), spot)})", check="saved-in-grace")
    rec = t.recover(spot)
    t.check_recovered(rec)


def _last_save_words(events: list[Event], spot: FaultRecord) -> str:
    saved = [e for e in events if e.type == CheckpointEv.SAVED and e.t <= spot.injected_at]
    return f"the newest checkpoint then: step {saved[-1].data.step}" if saved else "no checkpoint yet"
