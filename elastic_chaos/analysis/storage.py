"""What the checkpoint volume cost a fault: save times, time stalled on storage, failed saves,
and the grace period a node told to go had left when its last save ended.

Measured from the storage layer's events (elastic_chaos.watchers.storage: ``checkpoint/storage_save``
per file written, as the volume timed it; ``checkpoint/storage_stall``), so it applies to
every fault of a run whose checkpoint folder was behind the layer (a storage fault, and a
kill or a spot interruption on such a run), and to none otherwise.

- saves from the fault to the end of its window: how many, their p50/p95/max (finished
  ones; nearest rank: elastic_chaos.analysis.stats), the median before the fault for comparison, and how many failed
  with an errno (ENOSPC, EIO, EROFS; EINTR: a writer killed mid-save, counted apart);
- time stalled on storage in the window: what faults held every save and every stalled
  operation (a hung listing);
- the grace period: a node told to go (SIGTERM, then SIGKILL after ``grace_s``: a spot
  interruption, a graceful kill, a pod deletion) gets ``grace_s`` to save. The last save
  it began after its notice (or its SIGTERM) and how much of the grace period was left
  when that save ended (``grace_left_s``; negative: it ended after the deadline; none:
  it never ended, the SIGKILL came first).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.analysis.groups import FaultMark, fault_group
from elastic_chaos.analysis.metrics import Metric, Unit, declared, metric
from elastic_chaos.analysis.saves import JobSave, job_saves
from elastic_chaos.analysis.stats import percentile
from elastic_chaos.events import CheckpointEv, Event, NodeEv, ProgressEv, first, last, of

INTERRUPTED = "EINTR"
"""A save whose writer was killed mid-operation: interrupted, not failed by the volume."""


@dataclass
class StorageCost:
    """The checkpoint volume's part in one fault (None: not observed; ``missing`` says why)."""

    target: str | None
    injected_at: float
    saves: int | None = metric("saves", Unit.COUNT, "saves through the storage layer from the fault to the end "
                               "of its window", table=True, junit=True)
    save_before_s: float | None = metric("save before", Unit.SECONDS, "median save before the fault (as the job "
                                         "timed it, checkpoint started -> saved; else the volume's create -> "
                                         "rename)", table=True, junit=True)
    save_p50_s: float | None = metric("save p50", Unit.SECONDS, "median save from the fault to the end of its "
                                      "window", table=True, junit=True)
    save_p95_s: float | None = metric("save p95", Unit.SECONDS, "95th percentile save (nearest rank)",
                                      table=True, junit=True)
    save_max_s: float | None = metric("save max", Unit.SECONDS, "the longest save", table=True,
                                      junit=True, failure=True)
    stalled_s: float | None = metric("stalled", Unit.SECONDS, "time storage faults held the job's operations in "
                                     "the window (saves and others, summed over processes)", table=True,
                                     junit=True, failure=True)
    failed_saves: int | None = metric("failed saves", Unit.COUNT, "saves that failed with an errno from the "
                                      "volume (ENOSPC, EIO, EROFS, ...)", table=True, junit=True, failure=True)
    interrupted_saves: int | None = metric("interrupted", Unit.COUNT, "saves whose writer was killed mid-save",
                                           table=True, junit=True)
    grace_s: float | None = metric("grace", Unit.SECONDS, "SIGTERM -> SIGKILL for the node told to go",
                                   table=True, junit=True)
    last_save_s: float | None = metric("last save", Unit.SECONDS, "how long the last save that node began "
                                       "after its notice or SIGTERM took (to its end, or to its kill)",
                                       table=True, junit=True)
    grace_left_s: float | None = metric("grace left", Unit.SECONDS, "grace period left when that save ended "
                                        "(negative: after the deadline; none: it never ended)", table=True,
                                        junit=True, failure=True)
    saved_in_time: bool | None = None
    """Whether that node's last save ended inside its grace period (None: no SIGTERM, or no save)."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failed and interrupted saves by errno name."""
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for m in METRICS:
            v = getattr(self, m.key)
            out[m.key] = None if v is None else (round(float(v), 3) if m.unit.real else int(v))
        out.update({"saved_in_time": self.saved_in_time, "errors": dict(self.errors), "missing": list(self.missing)})
        return out

    @classmethod
    def from_json(cls, target: str | None, injected_at: float, raw: Mapping[str, Any]) -> StorageCost:
        values: dict[str, Any] = {m.key: m.unit.read(raw.get(m.key)) for m in METRICS}
        saved = raw.get("saved_in_time")
        errors = raw.get("errors") if isinstance(raw.get("errors"), Mapping) else {}
        return cls(target, injected_at, saved_in_time=saved if isinstance(saved, bool) else None,
                   errors={str(k): int(v) for k, v in (errors or {}).items() if isinstance(v, int)},
                   missing=[str(m) for m in raw.get("missing") or [] if isinstance(m, str)], **values)

    def describe(self) -> str:
        """One line: the saves in the window, the stall, and the grace period where one applied."""
        parts = [f"{self.saves or 0} save(s), p50 {_s(self.save_p50_s)}, max {_s(self.save_max_s)} "
                 f"(before: {_s(self.save_before_s)}); stalled {_s(self.stalled_s)} on storage"]
        if self.failed_saves:
            parts.append(f"{self.failed_saves} failed ({', '.join(f'{k} x{v}' for k, v in self.errors.items())})")
        if self.grace_s is not None:
            parts.append(grace_sentence(self))
        return "; ".join(parts)


METRICS: tuple[Metric, ...] = declared(StorageCost)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def grace_sentence(c: StorageCost) -> str:
    """The grace period in words: did the last save beat it."""
    if c.last_save_s is None:
        return f"no save began in its {_s(c.grace_s)} grace period"
    if c.grace_left_s is None:
        return f"its last save ran {_s(c.last_save_s)} and was killed at the end of the {_s(c.grace_s)} grace period"
    if c.grace_left_s >= 0:
        return (f"its last save took {_s(c.last_save_s)} and ended with {c.grace_left_s:.1f}s of its "
                f"{_s(c.grace_s)} grace period to spare")
    return (f"its last save took {_s(c.last_save_s)} and ended {-c.grace_left_s:.1f}s after its {_s(c.grace_s)} "
            "grace period")


def measure_storage(events: Sequence[Event], mark: FaultMark) -> StorageCost | None:
    """The StorageCost of ``mark``; None when the run had no storage layer (no storage events)."""
    if not of(events, CheckpointEv.STORAGE_LAYER, CheckpointEv.STORAGE_SAVE, CheckpointEv.STORAGE_SUMMARY):
        return None
    f, until, opens = mark.injected_at, mark.until, _window_start(events, mark)
    out = StorageCost(mark.target, f)
    saves = job_saves(events)
    before = [s.duration_s for s in saves if s.end is not None and s.end <= f and s.duration_s is not None]
    out.save_before_s = percentile(before, 50)
    window = [s for s in saves if s.start >= opens and (until is None or s.start <= until)]
    done = [s.duration_s for s in window if s.duration_s is not None]
    out.saves = len(window)
    if done:
        out.save_p50_s, out.save_p95_s, out.save_max_s = percentile(done, 50), percentile(done, 95), max(done)
    else:
        out.missing.append("no save finished from the fault to the end of its window")
    files = of(events, CheckpointEv.STORAGE_SAVE, after=opens, until=until)
    errors = Counter(str(e.data.error) for e in files if e.data.error)
    out.errors = dict(errors)
    out.interrupted_saves = errors.pop(INTERRUPTED, 0)
    out.failed_saves = sum(errors.values())
    stalls = of(events, CheckpointEv.STORAGE_STALL, after=opens, until=until)
    held = [float(e.data.stalled_s or 0.0) for e in files] + [float(e.data.stalled_s or 0.0) for e in stalls]
    out.stalled_s = round(sum(held), 3)
    _grace(events, mark, saves, out)
    return out


def _window_start(events: Sequence[Event], mark: FaultMark) -> float:
    """The fault's window opens at its injection, or at the notice of the node it tells to go."""
    notice = last(events, NodeEv.NOTICE, node=mark.target, until=mark.injected_at) if mark.target else None
    return min(mark.injected_at, notice.t) if notice is not None else mark.injected_at


def _termination(events: Sequence[Event], mark: FaultMark) -> tuple[float, float] | None:
    """(SIGTERM time, grace seconds) of the node the fault told to go, or None (no SIGTERM)."""
    if mark.target is None:
        return None
    lost = first(events, NodeEv.LOST, node=mark.target, after=mark.injected_at - 1.0, until=mark.until,
                 where=lambda e: (e.data.action or "").startswith("sigterm"))
    if lost is not None:
        grace = lost.data.grace_s if lost.data.grace_s is not None else mark.detail.get("grace_s")
        return (lost.t, float(grace)) if isinstance(grace, (int, float)) else None
    ending = first(events, NodeEv.TERMINATING, node=mark.target, after=mark.injected_at - 1.0, until=mark.until)
    if ending is not None and ending.data.grace_s is not None:
        return ending.t, float(ending.data.grace_s)
    return None


def _grace(events: Sequence[Event], mark: FaultMark, saves: Sequence[JobSave], out: StorageCost) -> None:
    ended = _termination(events, mark)
    if ended is None:
        return
    sigterm, grace = ended
    deadline = sigterm + grace
    out.grace_s = grace
    opens = _window_start(events, mark)
    begun = [s for s in saves if s.node == mark.target and opens <= s.start <= deadline]
    if not begun:
        stepped = last(events, ProgressEv.STEP, node=mark.target, until=deadline)
        why = (f" (its last training step came {sigterm - stepped.t:.1f}s before its SIGTERM: its workers were "
               "held, in a collective waiting for a slower rank or in the volume)"
               if stepped is not None and sigterm - stepped.t > 1.0 else "")
        out.missing.append(f"{mark.target} began no save between its notice and the end of its grace period{why}")
        out.saved_in_time = False
        return
    save = begun[-1]
    if save.end is None:
        out.saved_in_time = False
        killed = save.error in (None, INTERRUPTED)
        out.last_save_s = round(min(deadline, max((e.t for e in events), default=deadline)) - save.start, 3)
        out.missing.append(f"{mark.target}'s last save (began {save.start - sigterm:+.1f}s from its SIGTERM) never "
                           + ("ended: the SIGKILL came first" if killed else f"ended: it failed with {save.error}"))
        return
    out.last_save_s = round(save.end - save.start, 3)
    out.grace_left_s = round(deadline - save.end, 3)
    out.saved_in_time = save.end <= deadline


def _measure(events: Sequence[Event], mark: FaultMark) -> StorageCost | None:
    return measure_storage(events, mark)


STORAGE = fault_group(
    "storage", "Checkpoint storage", StorageCost, measure=_measure,
    read=lambda mark, raw: StorageCost.from_json(mark.target, mark.injected_at, dict(raw)))
"""The checkpoint volume's cost (report.json's ``storage``; Prometheus ``elastic_chaos_storage_*``): every
fault of a run whose checkpoint folder was behind the storage layer."""
