"""Stale reads on the checkpoint volume, then a restart that reads through them.

A restart trusts what the volume shows it: the newest ``ckpt-<step>.pt`` a listing holds, the
save a ``latest`` pointer names. Behind a cache that is not revalidated (an NFS or EFS client's,
an eventually consistent object store's) a node can be shown the folder as it was minutes ago:
the saves another node made since are not there, the pointer names an older step. The restart
then loads an older save without any error, and the steps after it, already saved, are trained
again; a job whose ranks each read the folder themselves can even resume one world from two
states. The hypothesis: the job notices (it resumes from the newest complete save all the same,
or it reports a save it cannot load, or it fails loudly), never silently resumes from an older
state. The final-state oracle (--compare-final, forced) then says whether the model ended as a
clean run's did.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.analysis.final_state import FinalState
from elastic_chaos.analysis.samples import account_samples
from elastic_chaos.analysis.saves import saves
from elastic_chaos.errors import RecoveryTimeout
from elastic_chaos.events import CheckpointEv, Event, of
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.node import KillNode
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.hypotheses.final import FinalStateOptions, check_final_state, prepare
from elastic_chaos.options import option, validate
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.runner.endings import JobFailed
from elastic_chaos.storagefs import OpRecord

CHECK = "resumed-newest"


@dataclass(frozen=True)
class StaleResume(FinalStateOptions):
    saves_after: int = option(2, "periodic saves the job completes while its reads are stale before the node that "
                                 "reported them is killed (each one a save the stale caches do not show)",
                              minimum=1, maximum=1000)

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class Load:
    """One rank's restore after the kill."""

    node: str | None
    rank: int | None
    step: int


def _trainers(events: Sequence[Event], after: float | None = None, until: float | None = None) -> list[Event]:
    """The saves the job itself reported durable (not the file watcher's) with their step, in the window."""
    return [e for e in saves(events, after=after, until=until, via="reported") if e.data.step is not None]


def first_resume(events: Sequence[Event], after: float) -> list[Load]:
    """The restart's restores after ``after``: each rank's first, until a rank restores again or every
    rank of the restarted world has (a later restart, a replacement joining, is another resume)."""
    out: list[Load] = []
    seen: set[int | None] = set()
    for e in of(events, CheckpointEv.LOADED, after=after):
        if e.data.rank in seen:
            break
        seen.add(e.data.rank)
        out.append(Load(e.node, e.data.rank, int(e.data.step or 0)))
        if e.data.world_size is not None and len(out) >= e.data.world_size:
            break
    return out


def stale_answers(ops: Iterable[OpRecord], rule: str, after: float) -> dict[str, list[str]]:
    """Per node, the paths whose lookups or listings the volume answered from the stale view after ``after``
    (a name hidden, an old version found, an old listing), in order, each once."""
    out: dict[str, list[str]] = {}
    for r in ops:
        if r.t < after or r.op not in ("lookup", "readdir") or rule not in (r.rule or "").split(","):
            continue
        paths = out.setdefault(r.node or "?", [])
        path = r.path or "the folder"
        if path not in paths:
            paths.append(path)
    return out


@hypothesis("stale-read", "stale reads on the shared checkpoint volume (an NFS/EFS client's caches): saves made "
                          "while they are stale, then the node that reported them is killed; the restart must resume "
                          "from the newest complete save or fail loudly, never silently from an older one",
            fault="stale-read", params=StaleResume, forced={"storage_layer": True, "compare_final": True})
def stale_read(t: Trial) -> None:
    """Make every node's reads of the checkpoint volume stale (the volume as it is now, each node's own
    changes aside), let the job complete ``--saves-after`` more saves, then hard-kill the node that
    reported them (in file mode the one writer of every save; in DCP mode the writer of ``latest``): the
    restart reads the folder through caches that do not show what that node changed (a listing without
    its files, an old ``latest``). Hypothesis:
    the job resumes from the newest complete save all the same, or notices (a save it reports it cannot
    load, a loud failure); it does not silently resume from an older state. The reference trainer trusts
    the volume: it resumes from the save that was newest when reads went stale, and the verdict says
    which steps it trained again and whether its final state still equals a clean run's."""
    p: StaleResume = t.params
    every = t.job.checkpoint_every
    t.start(prepare(t, p, fault_steps=(p.saves_after + 1) * every))
    t.steady()
    record = t.inject()
    made = _saves_while_stale(t, record, p.saves_after)
    writer = made[-1].node
    kill = t.inject(KillNode(node=writer))
    try:
        rec = t.recover(kill)
        if t.replaces_nodes:
            rec = t.regrow(kill)
    except (JobFailed, RecoveryTimeout) as exc:   # loud: judged here, then the run ends as it would
        t.verdict.require(*_judge(t, record, kill, failed=str(exc)), check=CHECK)
        raise
    # no separate loss bound: resuming from the newest complete save (the check below) is the bound, and
    # a resume from an older one is that check's failure, with the steps it cost
    t.verdict.require(rec.recovered, f"training resumed after the kill ({seconds(rec.recovery_s)})",
                      check="recovered")
    _check_aim(t, record, kill, made)
    loads = first_resume(t.run.timeline.events(), kill.injected_at)
    split = sorted({load.step for load in loads})
    final = check_final_state(t, p, known_cause=(
        f"its ranks resumed from different saves (steps {', '.join(map(str, split))}) after reading the volume "
        "through stale caches") if len(split) > 1 else None)
    t.verdict.require(*_judge(t, record, kill, regained=rec.regain_s is not None, final=final), check=CHECK)


def _saves_while_stale(t: Trial, record: FaultRecord, count: int) -> list[Event]:
    """Block until the job reported ``count`` more periodic saves after ``record``; those saves."""
    def made() -> list[Event]:
        return [e for e in _trainers(t.run.timeline.events(), after=record.injected_at)
                if (e.data.reason or "periodic") == "periodic"]
    pace = count * t.job.checkpoint_every * max(t.job.step_time, 0.01)
    t.run.wait_for(f"{count} saves while reads are stale", lambda e: len(made()) >= count,
                   timeout=t.opts.timeout_s + pace)
    return made()[:count]


def _check_aim(t: Trial, record: FaultRecord, kill: FaultRecord, made: list[Event]) -> None:
    """The node killed reported every save made while reads were stale, and the restart's reads met the
    stale view (the volume answered some of them from it, by its op log)."""
    rule = str((record.detail.get("rules") or ["?"])[0])
    saved = _trainers(t.run.timeline.events(), after=record.injected_at, until=kill.injected_at)
    writers = sorted({str(e.node) for e in saved})
    answered = stale_answers(t.run.platform.capability(CheckpointStorage).ops(), rule, kill.injected_at)
    met = "; ".join(f"{node}: {', '.join(paths[:4])}{' ...' if len(paths) > 4 else ''}"
                    for node, paths in sorted(answered.items()))
    steps = ", ".join(str(e.data.step) for e in saved)
    t.verdict.require(
        writers == [kill.target] and bool(answered),
        f"the node killed, {kill.target}, reported every save made while reads were stale (steps {steps}"
        + (f"; reported by {', '.join(writers)}" if writers != [kill.target] else "") + "); "
        + (f"after the kill the volume answered reads of these paths from the stale view: {met}" if answered else
           "after the kill no read was answered from the stale view: the restart never met it"),
        check="aim")


def _judge(t: Trial, record: FaultRecord, kill: FaultRecord, *, failed: str | None = None, regained: bool = False,
           final: FinalState | None = None) -> tuple[bool, str]:
    events = t.run.timeline.events()
    before_kill = _trainers(events, until=kill.injected_at)
    when_stale = _trainers(events, until=record.injected_at)
    unloadable = [(Path(str(e.data.path)).name, str(e.data.reason))
                  for e in of(events, CheckpointEv.CORRUPT, after=kill.injected_at)]
    return judge(newest=max((int(e.data.step) for e in before_kill), default=None),
                 stale_newest=max((int(e.data.step) for e in when_stale), default=None),
                 loads=first_resume(events, kill.injected_at), unloadable=unloadable, failed=failed,
                 regained=regained, rolled_back=account_samples(events).rolled_back_steps, final=final)


def judge(*, newest: int | None, stale_newest: int | None, loads: list[Load], unloadable: list[tuple[str, str]],
          failed: str | None = None, regained: bool = False, rolled_back: int = 0,
          final: FinalState | None = None) -> tuple[bool, str]:
    """Whether the restart after the kill kept clear of a silent resume from an older state, and the sentence
    that says what happened. ``newest``: the newest save the job reported durable before the kill;
    ``stale_newest``: the newest before reads went stale; ``loads``: each rank's restore of the restart;
    ``unloadable``: (save, reason) of each save the job reported it could not load after the kill;
    ``failed``: why the run stopped waiting for a resume (the job failed, or time ran out); ``regained``:
    training passed the step it had reached before the kill; ``rolled_back``: the sample account's step
    executions rolled back; ``final``: the final-state comparison, when made."""
    newest_is = f"step {newest}" if newest is not None else "none"
    stale_was = (f"step {stale_newest} was the newest save when reads went stale" if stale_newest is not None
                 else "no save had been made when reads went stale")
    said = "; ".join(f"{name} unloadable ({why})" for name, why in unloadable[:2])
    steps = sorted({load.step for load in loads})
    if len(steps) > 1:
        who = ", ".join(f"rank {load.rank} on {load.node} from step {load.step}" for load in loads)
        return False, (f"the ranks resumed from different saves after the kill ({who}): one world trained on from "
                       f"{len(steps)} states; the newest complete save was {newest_is}, and {stale_was}")
    resumed = steps[0] if steps else None
    older = resumed is not None and newest is not None and resumed < newest
    if failed is not None:
        if older and not unloadable:
            return False, (f"the job loaded step {resumed}, older than the newest complete save ({newest_is}), "
                           f"without reporting a save it could not load, then failed: {failed}")
        return True, (f"the job failed loudly after the kill rather than train on from what stale reads showed it: "
                      f"{failed}" + (f" (it reported {said})" if said else ""))
    if resumed is None:
        return False, "the job trained again after the kill without saying which save it resumed from"
    if newest is None or resumed == newest:
        return True, (f"the job resumed from step {resumed}, the newest complete save, though its nodes read the "
                      f"volume through stale caches ({stale_was})")
    if not older:
        return False, f"the job resumed from step {resumed}, not from the newest complete save ({newest_is})"
    if unloadable:
        return True, (f"the job noticed: it reported {said} and resumed from step {resumed}, older than the newest "
                      f"complete save ({newest_is})")
    text = (f"the job resumed from step {resumed}, older than the newest complete save ({newest_is}), without "
            f"reporting a save it could not load (no load error, no checksum mismatch); {stale_was}")
    if regained:
        text += f"; steps {resumed + 1}-{newest}, already saved, were trained again"
    if rolled_back:
        text += f" (the sample account: {rolled_back} step executions rolled back in all)"
    if final is not None and final.equal:
        text += ("; its final state equals the clean run's all the same: retraining those steps reproduced the same "
                 "state, so the stale read cost work, not the model's state")
    elif final is not None:
        first = final.first.path if final.first is not None else "?"
        text += f"; its final state diverged from the clean run's, first at {first}"
    return False, text
