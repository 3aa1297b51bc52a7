"""Silent corruption: bits flipped in a completed checkpoint, then a restart that loads it.

A lost-steps bound and a resume from "the newest checkpoint that loads" cannot see a checkpoint
whose bits changed after its save: it loads (torch.load does not check the zip's CRC-32) and the job
trains on from other values. Only the final-state oracle (elastic_chaos.hypotheses.final) shows
it: the job's final state differs from a clean run's, first in the tensor that was hit. A job that
checks a sum of its own notices, reports the file corrupt and falls back to the save before (or
fails loudly); it then ends as a clean run does.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.analysis.final_state import FinalState
from elastic_chaos.events import CheckpointEv, Event
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.node import WorkerCrash
from elastic_chaos.faults.triggers import checkpoint_saved
from elastic_chaos.hypotheses.api import Trial, hypothesis
from elastic_chaos.hypotheses.final import FinalStateOptions, check_final_state, prepare
from elastic_chaos.options import option, validate

CHECK = "no-silent-corruption"


@dataclass(frozen=True)
class Corruption(FinalStateOptions):
    checksum: bool = option(False, "the reference trainer stores the sha256 of each save's state and verifies it "
                                   "on load (its --checkpoint-checksum): a restore that meets the corrupted file "
                                   "reports it and falls back to the previous save", flag="--checkpoint-checksum")

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("corrupt-checkpoint", "silent data corruption: bits flipped in the newest complete checkpoint, then a "
                                  "worker crash makes the job restart from it; the job must notice (a load error, "
                                  "a checksum) or the final state shows it trained on from corrupted state",
            fault="corrupt-checkpoint", params=Corruption, forced={"compare_final": True})
def corrupt_checkpoint(t: Trial) -> None:
    """The moment a save past the steady step is durable, flip bits in its tensor data (the file still
    loads), then crash a worker so the job restarts and loads its newest checkpoint. Hypothesis: the job
    does not train on from corrupted state unnoticed. It either notices (reports the file corrupt and
    resumes from an older save, or fails loudly) and then ends as a clean run of the same seed does, or it
    fails this check and the final-state check names the tensor that diverged. The reference trainer
    notices only with ``--checkpoint-checksum``."""
    job = prepare(t, t.params, loses_a_node=False, fault_steps=t.job.checkpoint_every)
    if t.params.checksum:
        job = dataclasses.replace(job, trainer_args=(*job.trainer_args, "--checkpoint-checksum"))
        t.settings = dataclasses.replace(t.settings, job=job)   # the clean reference run checksums too
    t.start(job)
    t.steady()
    record = t.run.arm(t.fault(), checkpoint_saved(min_step=t.steady_steps)).wait(timeout=t.opts.timeout_s)
    crash = t.inject(WorkerCrash(node=t.opts.target))
    rec = t.recover(crash)
    # a fallback to the save before the corrupted one costs up to two intervals
    t.check_recovered(rec, lost_at_most=2 * t.job.checkpoint_every)
    corrupted = record.detail.get("step")
    check_aim(t, record, crash, "the corrupted checkpoint", "corruption")
    # a job that loaded the corrupted save without a word diverges because of the flipped bits, whatever
    # state class the first difference falls in: said so, not guessed as a resume bug
    silent = not _reports(t, record)
    final = check_final_state(t, t.params, known_cause=(
        f"the {record.detail.get('bits')} bit(s) this run's fault flipped in {record.detail.get('tensor')} of step "
        f"{corrupted}'s save, which the job loaded without noticing") if silent else None)
    ok, reason = judge(t, record, rec.resumed_from_step, final)
    t.verdict.require(ok, reason, check=CHECK)


def check_aim(t: Trial, record: FaultRecord, crash: FaultRecord, what: str, harm: str) -> None:
    """The ``aim`` check of a hypothesis that harms a save, then crashes a worker so the job loads it: no
    newer save was made between the two (else the restart never met the ``harm``)."""
    step = record.detail.get("step")
    newer = [e.data.step for e in t.run.timeline.select(CheckpointEv.SAVED, after=record.injected_at,
                                                         until=crash.injected_at)
             if e.data.step is not None and step is not None and e.data.step > int(step)]
    t.verdict.require(not newer, f"{what} (step {step}) was the newest when the worker crashed"
                      + (f"; it was not: step {newer[-1]} was saved before the crash, so the restart did not meet "
                         f"the {harm}" if newer else ""), check="aim")


def _reports(t: Trial, record: FaultRecord) -> list[Event]:
    """The job's reports, after the fault, that the corrupted file is corrupt."""
    path = Path(str(record.detail.get("file")))
    return [e for e in t.run.timeline.select(CheckpointEv.CORRUPT, after=record.injected_at)
            if e.data.path and Path(str(e.data.path)).resolve() == path]


def judge(t: Trial, record: FaultRecord, resumed: int | None, final: FinalState | None) -> tuple[bool, str]:
    """Whether the job kept clear of training on from the corrupted state, and the sentence that says how."""
    corrupted = record.detail.get("step")
    hit = f"{record.detail.get('bits')} bit(s) of {record.detail.get('tensor')} in step {corrupted}'s save"
    noticed = _reports(t, record)
    if noticed:
        return True, (f"the job noticed the corruption ({hit}): {noticed[0].data.reason}; it resumed from step "
                      f"{resumed}")
    if resumed is not None and corrupted is not None and resumed < int(corrupted):
        return True, f"the job resumed from step {resumed}, an older save than the corrupted one ({hit}), unreported"
    if final is None:
        return False, (f"the job resumed from step {resumed} without reporting the corruption ({hit}); the final "
                       "state was not compared, so whether it trained on from corrupted state is not known")
    if final.equal:
        return True, (f"the job loaded the corrupted save ({hit}) without noticing, yet its final state equals the "
                      "clean run's: the flipped bits did not reach its state")
    diverged = final.first.path if final.first is not None else "?"
    tensor = str(record.detail.get("tensor"))
    too = (f" ({tensor}, the tensor hit, differs too)" if any(d.path == tensor for d in final.divergences)
           else "")
    return False, (f"the job resumed from the corrupted checkpoint of step {resumed} ({hit}) without noticing and "
                   f"trained on from corrupted state: its final state diverged from the clean run's, first at "
                   f"{diverged}{too}; a checksum stored with each save and verified on load would have caught it")
