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

Time order alone is not enough when a worker of a superseded world outlives it:
a frozen node that thaws after the survivors restored and trained on can still
complete its old world's step, stamped after everything. So each step and load
belongs to a worker *generation* (node, PID, and how many times that PID said it
started: a re-created pod reuses PIDs). A load by a generation that began after
another generation's first step supersedes that older one: its steps above the
restored step are void whenever they are stamped, until it loads again itself.
A load by a generation as old as the others (an in-process reload of the same
world) supersedes nothing. (A peer of the same restart steps only after every
rank loaded, so after the loader began; a clock behind enough to stamp its step
before that would already have it rolled back by the time order.)
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
    unreported: list[tuple[int, int]] = field(default_factory=list)
    """(epoch, position) missing from the reports but not from the training: a step a later restore shows
    complete lacks some ranks' reports (their node was lost before its last lines were read), and the
    epoch's missing positions are no more than those ranks' share of it."""
    unreported_steps: list[tuple[int, int, int]] = field(default_factory=list)
    """(step, ranks that reported, world size) for each such step."""

    @property
    def exactly_once(self) -> bool:
        return self.accounted and not self.duplicates and not self.gaps

    def summary(self, limit: int = 5) -> str:
        if not self.accounted:
            return "no sample ranges were reported; exactly-once could not be checked"
        head = (f"{self.committed_steps} committed steps, {self.samples} samples, "
                f"{self.rolled_back_steps} step executions rolled back")
        if self.unreported:
            steps = ", ".join(f"step {n} ({got} of {world} ranks)" for n, got, world in self.unreported_steps)
            head += (f"; {len(self.unreported)} positions trained but unreported: {steps} reported by fewer ranks "
                     "than its world, though a later restore from it shows it completed (a node lost before its "
                     "last lines were read)")
        if self.exactly_once:
            return head + "; every sample exactly once"
        return (head + f"; {len(self.duplicates)} duplicated (e.g. {self.duplicates[:limit]}), "
                f"{len(self.gaps)} never trained (e.g. {self.gaps[:limit]})")


@dataclass
class _Generation:
    """One worker process's life as the timeline shows it."""

    began: float
    """Its first event (start, load or step)."""
    first_step: float | None = None
    void_above: int | None = None
    """A later generation restored this step: this one's steps above it were thrown away."""


class _Generations:
    """The worker generations seen so far, by (node, PID); events without a PID (a script's own lines
    read by a regex) belong to none and are ordered by time alone."""

    def __init__(self) -> None:
        self._live: dict[tuple[str | None, int], _Generation] = {}

    def of(self, e: Event) -> _Generation | None:
        pid = getattr(e.data, "pid", None)
        if pid is None:
            return None
        key = (e.node, int(pid))
        if e.type == ProgressEv.START or key not in self._live:
            self._live[key] = _Generation(began=e.t)
        return self._live[key]

    def restored(self, by: _Generation | None, step: int) -> None:
        """``by`` loaded ``step``: it supersedes every generation that stepped before it began, and a
        generation that reloads itself is current again."""
        if by is None:
            return
        by.void_above = None
        for g in self._live.values():
            if g is not by and g.first_step is not None and g.first_step < by.began:
                g.void_above = step if g.void_above is None else min(g.void_above, step)


def account_samples(events: Iterable[Event]) -> SampleAccount:
    """Rebuild the committed history from ``events`` and check exactly-once per epoch."""
    history: dict[int, dict[int, tuple[int, list[list[int]]]]] = {}  # step -> rank -> (epoch, ranges)
    world: dict[int, int] = {}  # step -> world size its ranks reported
    account = SampleAccount()
    epoch_size: int | None = None
    generations = _Generations()
    restores: list[tuple[float, int]] = []   # (when, step) of every restore: a save of the step existed
    reported_at: dict[int, float] = {}       # step -> its latest report
    for e in sorted(events, key=lambda ev: ev.t):
        generation = generations.of(e)
        if generation is not None and e.type == ProgressEv.STEP and generation.first_step is None:
            generation.first_step = e.t
        if e.type == CheckpointEv.LOADED:
            restored = e.data.step or 0
            doomed = [s for s in history if s > restored]
            account.rolled_back_steps += sum(len(history[s]) for s in doomed)
            for s in doomed:
                del history[s]
                world.pop(s, None)
            generations.restored(generation, restored)
            restores.append((e.t, restored))
        elif e.type == ProgressEv.STEP and e.data.samples is not None:
            step: Step = e.data
            account.accounted = True
            if generation is not None and generation.void_above is not None and step.step > generation.void_above:
                account.rolled_back_steps += 1   # a superseded world's step: its update was lost
                continue
            if step.epoch_size is not None:
                epoch_size = step.epoch_size
            ranges = [list(r) for r in step.samples or ()]
            history.setdefault(step.step, {})[step.rank or 0] = (step.epoch or 0, ranges)
            reported_at[step.step] = e.t
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
    unheard = _unreported_shares(history, world, restores, reported_at)
    for epoch in sorted(counts):
        c = counts[epoch]
        account.samples += sum(c.values())
        account.duplicates += [(epoch, p, n) for p, n in sorted(c.items()) if n > 1]
        # a finished epoch (a later one has a settled step) must have covered all
        # of it; the current one everything below the furthest settled position
        end = frontier.get(epoch, -1)
        if epoch < last_settled_epoch and epoch_size is not None:
            end = epoch_size
        missing = [(epoch, p) for p in range(end) if p not in c]
        share, short = unheard.get(epoch, (0, []))
        if missing and len(missing) <= share:
            account.unreported += missing
            account.unreported_steps += short
        else:
            account.gaps += missing
    return account


def _unreported_shares(history: dict[int, dict[int, tuple[int, list[list[int]]]]], world: dict[int, int],
                       restores: list[tuple[float, int]], reported_at: dict[int, float]
                       ) -> dict[int, tuple[int, list[tuple[int, int, int]]]]:
    """Per epoch, how many positions the committed steps that lack some ranks' reports trained unseen, and
    those steps: a step that a restore after it reached (a save of it or of a later step existed, so its
    whole world completed it) with fewer reports than its world size, each missing rank taking as many of
    the epoch's positions as its peers did."""
    out: dict[int, tuple[int, list[tuple[int, int, int]]]] = {}
    for n, ranks in sorted(history.items()):
        size = world.get(n, len(ranks))
        if len(ranks) >= size or not any(t > reported_at.get(n, t) and r >= n for t, r in restores):
            continue
        for epoch in sorted({ep for ep, _ in ranks.values()}):
            per_rank = max(sum(int(b) - int(a) for a, b in ranges) for ep, ranges in ranks.values() if ep == epoch)
            share, short = out.setdefault(epoch, (0, []))
            short.append((n, len(ranks), size))
            out[epoch] = (share + (size - len(ranks)) * per_rank, short)
    return out
