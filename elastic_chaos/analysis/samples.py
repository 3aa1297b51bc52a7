"""Exactly-once data accounting over the committed training history.

Each step event of the reference trainer lists the ``[start, stop)`` ranges
of the epoch's sample order that its rank consumed. A step that is later
rolled back by a restore (the job resumed from an older checkpoint) did not
count: its updates were thrown away. So the committed history is rebuilt in
time order — a ``checkpoint loaded`` at step r discards every recorded step
after r — and then every position of each epoch must appear exactly once:
positions seen twice are duplicates, positions skipped below the furthest
one consumed are gaps. A naive ``DistributedSampler`` restart after a resize
fails this; the reference elastic sampler passes it.

The account is also taken while the job runs, and each node's events arrive
through its own follower, so one rank's latest steps can be on the timeline
before another's. A step is *settled* once every rank of its world has
reported it; gaps are only looked for below what settled steps consumed, so a
rank whose report is still in flight is not mistaken for a skipped sample.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from elastic_chaos.events import CheckpointEv, Event, ProgressEv
from elastic_chaos.events.progress_events import Step


@dataclass
class SampleAccount:
    committed_steps: int = 0
    """Steps in the final history (rolled-back steps excluded)."""
    rolled_back_steps: int = 0
    """Step executions thrown away by restores (work done twice)."""
    samples: int = 0
    """Sample positions consumed in the committed history."""
    duplicates: list[tuple[int, int, int]] = field(default_factory=list)
    """(epoch, position, times) for every position trained more than once."""
    gaps: list[tuple[int, int]] = field(default_factory=list)
    """(epoch, position) never trained although later positions were, or the epoch
    ended (steps report ``epoch_size``)."""
    accounted: bool = False
    """False when no step reported its samples (nothing could be checked)."""

    @property
    def exactly_once(self) -> bool:
        return self.accounted and not self.duplicates and not self.gaps

    def summary(self, limit: int = 5) -> str:
        if not self.accounted:
            return "no sample ranges were reported; exactly-once could not be checked"
        head = (f"{self.committed_steps} committed steps, {self.samples} samples, "
                f"{self.rolled_back_steps} step executions rolled back")
        if self.exactly_once:
            return head + "; every sample exactly once"
        return (head + f"; {len(self.duplicates)} duplicated (e.g. {self.duplicates[:limit]}), "
                f"{len(self.gaps)} never trained (e.g. {self.gaps[:limit]})")


def account_samples(events: Iterable[Event]) -> SampleAccount:
    """Rebuild the committed history from ``events`` and check exactly-once per epoch."""
    history: dict[int, dict[int, tuple[int, list[list[int]]]]] = {}  # step -> rank -> (epoch, ranges)
    world: dict[int, int] = {}  # step -> world size its ranks reported
    account = SampleAccount()
    epoch_size: int | None = None
    for e in sorted(events, key=lambda ev: ev.t):
        if e.type == CheckpointEv.LOADED:
            restored = e.data.step or 0
            doomed = [s for s in history if s > restored]
            account.rolled_back_steps += sum(len(history[s]) for s in doomed)
            for s in doomed:
                del history[s]
                world.pop(s, None)
        elif e.type == ProgressEv.STEP and e.data.samples is not None:
            step: Step = e.data
            account.accounted = True
            if step.epoch_size is not None:
                epoch_size = step.epoch_size
            ranges = [list(r) for r in step.samples or ()]
            history.setdefault(step.step, {})[step.rank or 0] = (step.epoch or 0, ranges)
            if step.world_size is not None:
                world[step.step] = max(world.get(step.step, 0), step.world_size)
    account.committed_steps = len(history)
    counts: dict[int, Counter[int]] = {}
    frontier: dict[int, int] = {}  # epoch -> furthest position a settled step consumed
    settled_epochs: set[int] = set()
    for n, ranks in history.items():
        settled = len(ranks) >= world.get(n, len(ranks))
        for epoch, ranges in ranks.values():
            c = counts.setdefault(epoch, Counter())
            for start, stop in ranges:
                c.update(range(int(start), int(stop)))
                if settled and int(stop) > int(start):
                    frontier[epoch] = max(frontier.get(epoch, -1), int(stop) - 1)
            if settled:
                settled_epochs.add(epoch)
    last_settled_epoch = max(settled_epochs, default=-1)
    for epoch in sorted(counts):
        c = counts[epoch]
        account.samples += sum(c.values())
        account.duplicates += [(epoch, p, n) for p, n in sorted(c.items()) if n > 1]
        # a finished epoch (a later one has a settled step) must have covered all
        # of it; the current one everything below the furthest settled position
        end = frontier.get(epoch, -1)
        if epoch < last_settled_epoch and epoch_size is not None:
            end = epoch_size
        account.gaps += [(epoch, p) for p in range(end) if p not in c]
    return account
