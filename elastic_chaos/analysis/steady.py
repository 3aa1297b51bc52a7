"""Is the job steady? Checked before any fault: an experiment on an unsteady job tests nothing.

Chaos Toolkit's model: the steady-state hypothesis is checked *before* the method. A job
whose workers crashed and restarted during warm-up (a script's own race on a shared
file, a missing module on one node) has spent restarts the fault would need, and a kill
then ends it: that is not a verdict on recovery. So before a hypothesis injects its
fault, the job must be

- **formed at its size**: its latest steps run at the world size it was started with;
- **free of failures since it started**: no worker or worker group failed, no node
  exited or was lost (a restart to admit a node that joined late is formation, not a
  failure);
- **saving, where a bound needs it**: when a hypothesis bounds the steps a fault may cost
  by the checkpoint interval and the job has passed two intervals, a checkpoint has been
  saved (reported, or seen by the file watcher). Two, not one: a save due at the first
  interval may still be being written when the step after it is logged.

``unsteady`` returns what is not so, each with the events that show it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.events import AgentEv, CheckpointEv, Event, FaultEv, NodeEv, ProgressEv, RunnerEv, first, last, of


@dataclass(frozen=True)
class Unsteady:
    """One way the job is not steady, in a sentence, with the events that show it."""

    what: str
    evidence: tuple[Event, ...] = ()


def failures(events: Sequence[Event], *, until: float | None = None) -> list[Event]:
    """Worker and worker-group failures, and nodes that exited or were lost, up to ``until``."""
    return of(events, AgentEv.WORKER_FAILED, AgentEv.WORKER_GROUP_FAILED, NodeEv.EXITED, NodeEv.LOST, until=until)


def restarts_before(events: Sequence[Event], until: float) -> int:
    """The most worker-group restarts one agent spent up to ``until`` (its restart budget, used)."""
    per_node: dict[str | None, int] = {}
    for e in of(events, AgentEv.WORKER_GROUP_FAILED, until=until):
        per_node[e.node] = per_node.get(e.node, 0) + 1
    return max(per_node.values(), default=0)


def unsteady(events: Sequence[Event], *, world_size: int, checkpoint_every: int | None = None,
             sees_saves: bool = True, watched: str | None = None,
             workdir_holds: Sequence[str] = (), unsettled: int = 0,
             poll_s: float = 0.2) -> list[Unsteady]:
    """What keeps the job from being steady now (see the module docstring); [] when it is.
    ``world_size``: the ranks it was started with; ``checkpoint_every``: the interval a bound
    relies on (None: no bound needs saves); ``sees_saves``: whether saves are observable at all
    (a script that neither reports them nor has a --checkpoint path watched); ``unsettled``: how often the
    watched file changed again before holding still for one poll of ``poll_s`` (CheckpointWatcher.unsettled)."""
    out: list[Unsteady] = []
    steps = of(events, ProgressEv.STEP)
    latest = steps[-1] if steps else None
    if latest is None:
        return [Unsteady("no training step was seen")]
    if latest.data.world_size is not None and latest.data.world_size != world_size:
        out.append(Unsteady(f"it trains at world size {latest.data.world_size}, not the {world_size} it was "
                            "started with", (latest,)))
    failed = failures(events, until=latest.t)
    if failed:
        spent = restarts_before(events, latest.t)
        nodes = sorted({str(e.node) for e in failed})
        out.append(Unsteady(f"it failed before the fault: {len(failed)} failure(s) on {', '.join(nodes)}"
                            + (f", {spent} restart(s) of its budget spent in warm-up" if spent else "")
                            + f" (first: {failed[0].type} on {failed[0].node})", tuple(failed[:6])))
    if checkpoint_every is not None and sees_saves and latest.data.step >= 2 * checkpoint_every:
        # any save seen by now counts, also one stamped after the latest step: a file's save is
        # stamped with its mtime but seen a poll or two later, and fast epochs outrun the polls
        unseen = first(events, CheckpointEv.SAVED) is None
        if unseen and watched is not None and unsettled >= 2:
            # written, often: but never still long enough to tell a complete save from one being written
            out.append(Unsteady(f"the --checkpoint path {watched!r} was rewritten {unsettled} times by step "
                                f"{latest.data.step} without once holding still for one poll ({poll_s:g} s), so no "
                                "save could be confirmed complete: the script saves faster than a file can be "
                                f"watched; save less often (every {2 * poll_s:g} s at the least), or report saves "
                                "with elastic_chaos.trainer.progress (docs/INTEGRATE.md)"))
        elif unseen and watched is not None:
            holds = ", ".join(workdir_holds) or "nothing"
            out.append(Unsteady(f"nothing was written at the --checkpoint path {watched!r} by step "
                                f"{latest.data.step}, two save intervals ({checkpoint_every}) in (its folder holds: "
                                f"{holds}): pass --checkpoint as the file or folder the script saves to, relative "
                                "to the job's workdir, and --checkpoint-every as its save interval"))
        elif unseen:
            out.append(Unsteady(f"no checkpoint was saved by step {latest.data.step}, two intervals in, though "
                                f"the bound on lost progress is one checkpoint interval ({checkpoint_every}): "
                                "is --checkpoint-every the script's own save interval?"))
    return out




LANDING_NOTE_S = 1.0
"""A fault whose injection began this long after steady state was reached is explained in the report."""


def landing(events: Sequence[Event], injected_at: float, unit: str = "step") -> str | None:
    """Why the fault at ``injected_at`` began more than LANDING_NOTE_S after the job was found steady
    (the runner's ``steady`` phase names the step and any wait), in the job's unit; None when it came
    at once, or when another fault came between."""
    steady = [e for e in of(events, RunnerEv.PHASE, until=injected_at) if e.data.phase == "steady"]
    began = [e for e in of(events, RunnerEv.PHASE, until=injected_at) if e.data.phase == "inject"]
    if not steady or not began or first(events, FaultEv.INJECTED, after=steady[-1].t,
                                        where=lambda e: e.t < injected_at) is not None:
        return None
    found, start = steady[-1], began[-1]
    reached = last(events, ProgressEv.STEP, until=found.t, where=lambda e: e.data.step == found.data.step)
    origin = reached.t if reached is not None else found.t
    gap = start.t - origin
    if gap < LANDING_NOTE_S:
        return None
    at = last(events, ProgressEv.STEP, until=start.t)
    moved = f", at {unit} {at.data.step}" if at is not None and at.data.step != found.data.step else ""
    why = found.data.why or ("the hypothesis prepared its fault" if start.t - found.t >= LANDING_NOTE_S
                             else "the logs were read past that step")
    return (f"the fault began {gap:.1f} s after steady state was reached ({unit} {found.data.step}){moved}: "
            f"{why}")
