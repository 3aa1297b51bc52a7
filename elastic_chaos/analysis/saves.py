"""The job's saves, counted and timed once: the report, the checks and the advice read these.

A save is a ``checkpoint/saved`` event: reported by the job (elastic_chaos.trainer.progress, an integrated
script) or seen by the checkpoint file watcher (``via: file``: a file, or a folder of files, that
changed and then held still). ``saves`` lists them (up to a time), so "how many saves" has one
answer everywhere. ``job_saves`` pairs each save the job began with the moment it was durable
(the job's own ``checkpoint/started`` -> ``checkpoint/saved``, else the storage layer's create ->
rename), and ``save_duration_s`` is their median: what one more save costs.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.events import CheckpointEv, Event, first, of


def saves(events: Sequence[Event], *, after: float | None = None, until: float | None = None,
          via: str | None = None) -> list[Event]:
    """The run's saves in (``after``, ``until``]; ``via``: ``file`` (seen by the file watcher) or
    ``reported`` (said by the job), None: both."""
    found = of(events, CheckpointEv.SAVED, after=after, until=until)
    if via == "file":
        return [e for e in found if e.data.via == "file"]
    if via == "reported":
        return [e for e in found if e.data.via != "file"]
    return found


@dataclass(frozen=True)
class JobSave:
    """One save as the job timed it: from its start to the moment it was durable (None: never)."""

    node: str | None
    start: float
    end: float | None
    step: int | None = None
    reason: str | None = None
    error: str | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.end is None else self.end - self.start


def job_saves(events: Sequence[Event]) -> list[JobSave]:
    """Every save of the run, in start order: the job's own ``checkpoint/started`` ->
    ``checkpoint/saved`` (the reference trainer, an integrated script) when it reports them,
    else the storage layer's (create -> rename, as the volume timed it)."""
    started = [e for e in of(events, CheckpointEv.STARTED) if e.data.via != "file"]
    if not started:
        return [JobSave(e.node, float(e.data.started_at or e.t), None if e.data.error else e.t,
                        error=e.data.error) for e in of(events, CheckpointEv.STORAGE_SAVE)]
    saved = [e for e in of(events, CheckpointEv.SAVED) if e.data.via != "file"]
    out = []
    for i, e in enumerate(started):
        who = (e.node, e.data.rank)
        nxt = next((n.t for n in started[i + 1:] if (n.node, n.data.rank) == who), None)
        done = next((d for d in saved if (d.node, d.data.rank) == who and d.data.step == e.data.step
                     and d.t >= e.t and (nxt is None or d.t <= nxt)), None)
        out.append(JobSave(e.node, e.t, done.t if done is not None else None, e.data.step, e.data.reason,
                           error=None if done is not None else _volume_error(events, e.node, e.t, nxt)))
    return out


def _volume_error(events: Sequence[Event], node: str | None, start: float, until: float | None) -> str | None:
    """The errno the volume gave the first failed file of ``node`` in [start, until] (None: none)."""
    failed = first(events, CheckpointEv.STORAGE_SAVE, node=node, after=start - 1e-6, until=until,
                   where=lambda e: bool(e.data.error))
    return failed.data.error if failed is not None else None




def save_duration_s(events: Sequence[Event]) -> float | None:
    """The median seconds a save took, from its start to durable (None: no save was timed)."""
    done = [s.duration_s for s in job_saves(events) if s.duration_s is not None]
    return statistics.median(done) if done else None
