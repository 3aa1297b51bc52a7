"""The harness checked against real torchrun: the scale bench's real jobs replayed, figure against figure.

:func:`validate` replays each real job of bench/local_nodes.py (N-1:N nodes, fast, etcd-v2) in the harness --
the same nodes arriving at the same offsets, then hard kills, each survivor's workers failing when the real
survivor's agent started its next rendezvous -- and compares formation and re-formation as torchrun's agents
logged them with the harness' own (:class:`ValidationRow`, kept in results.json). :func:`recorded` sets the
scale bench's own last real re-formations beside the harness at the same N (derived, not kept).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.json_record import JsonRecord, read
from bench.local_nodes import NodesRun
from bench.rdzv.episodes import measure_size
from bench.rdzv.pipe import HarnessError
from bench.rdzv.records import SizeResult
from bench.rdzv.sweep import scale_job
from bench.stats import median, median_of

VALIDATION_REPEAT = 5
"""Hard kills per size in the harness' replay of a real job: their median is compared."""
TOLERANCE_S = 1.5
"""How far the harness may be from real torchrun on one measurement, and why (dynamic_rendezvous.py):
a waiting node polls the state every 1 s (``_delay(seconds=1)`` on SYNC) and a node's last heartbeat
before a kill lands 1 to 2 keep-alive intervals (1 s with fast) before it; each side of a comparison
draws both phases independently, so one measurement each can differ by up to 2 s, with a standard
deviation of about 0.6 s: 1.5 s is 2.5 of those."""
REAL_LOAD_PER_CORE = 3.0
"""A real job whose load average passed this many runnable processes per core measured this machine: its
agents' heartbeat threads and etcd waited for a CPU behind N workers importing torch (16 local nodes on 2
cores: formation 162 s, where the harness, without workers, forms in 1-2 s). Its row is shown, not judged."""


@dataclass(frozen=True)
class Compared(JsonRecord):
    """One figure, real torchrun against the harness (seconds; None: not measured on that side)."""

    real: float | None = None
    harness: float | None = None
    diff: float | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @classmethod
    def of(cls, real: float | None, harness: float | None) -> Compared:
        return cls(real, harness, None if harness is None or real is None else round(harness - real, 3))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Compared:
        return cls(**read(cls, raw))


@dataclass(frozen=True)
class ValidationRow(JsonRecord):
    """One real size replayed in the harness (or ``error``: the harness failed to)."""

    nodes: int
    load_avg_real: float | None = None
    load_before: float | None = None
    restarts_replayed: bool = False
    formation_s: Compared = Compared()
    reformation_s: Compared = Compared()
    within: bool = False
    error: str | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @classmethod
    def harness_failed(cls, nodes: int, error: str) -> ValidationRow:
        return cls(nodes, error=error, absent=frozenset({"load_avg_real", "load_before", "restarts_replayed",
                                                         "formation_s", "reformation_s", "within"}))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ValidationRow:
        return cls(**read(cls, raw, formation_s=Compared.from_json, reformation_s=Compared.from_json))


def validate(real: Sequence[NodesRun], runs: Path, say: Callable[[str], None]) -> list[ValidationRow]:
    """One row per real scale-bench size that logged its rendezvous: real vs harness, formation (from the
    last node's start) and re-formation after one hard kill. Blocks for every replay."""
    rows = []
    for r in real:
        n = r.nodes
        if not r.ok or r.rdzv is None or r.rdzv.formation_s is None or n < 2:
            continue
        say(f"validation: harness replay of the real {n}-node job")
        restarts = list(r.rdzv.restarts_s) if r.rdzv.restarts_s is not None else None
        try:
            result = measure_size(scale_job("etcd-v2", n, lo=n - 1), runs / f"rdzv-validate-{n}", say, steady_s=0,
                                  modes=("hard",), losses=(("1", None),), offsets=list(r.rdzv.offsets_s) or None,
                                  restarts=restarts, repeat=VALIDATION_REPEAT)
        except HarnessError as exc:
            rows.append(ValidationRow.harness_failed(n, str(exc)))
            continue
        rows.append(_row(r, result))
    return rows


def _row(real: NodesRun, result: SizeResult) -> ValidationRow:
    assert real.rdzv is not None
    formation = Compared.of(real.rdzv.formation_s, _median_of(result, "formation"))
    reformation = Compared.of(real.rdzv.reformation_s, _median_of(result, "hard 1"))
    within = all(c.diff is not None and abs(c.diff) <= TOLERANCE_S for c in (formation, reformation))
    return ValidationRow(real.nodes, real.load_avg_1m, result.load_before, real.rdzv.restarts_s is not None,
                         formation, reformation, within)


def _median_of(result: SizeResult, label: str) -> float | None:
    return median_of(e.seconds for e in result.episodes if e.label == label)


def real_limited(row: ValidationRow, cores: int) -> bool:
    """Whether this machine, not torch, set the pace of the real job behind a validation row."""
    load = row.load_avg_real
    return load is not None and load > REAL_LOAD_PER_CORE * max(cores, 1)


@dataclass(frozen=True)
class Recorded:
    """Re-formation after one hard kill: a real job of the scale (or recovery) bench beside the harness."""

    nodes: int
    real: float
    harness: float
    diff: float
    load: float | str | None


def recorded(sizes: Mapping[str, Sequence[SizeResult]], validation: Sequence[ValidationRow],
             kill_case: Mapping[str, Any] | None, real_jobs: Sequence[NodesRun]) -> list[Recorded]:
    """Re-formation after one hard kill in the scale bench's last real jobs (``real_jobs``: detect + rendezvous
    phases, kill -> the survivors' round complete) beside the harness' on etcd-v2 at the same N: the validation
    replay's where there is one, else the sweep's ``hard 1`` (range N-10 %:N; for one lost node the same
    rendezvous as N-1:N); at 2 nodes, the recovery bench's ``kill_case`` (etcd-v2/fast/kill-node) too."""
    harness: dict[int, float] = {}
    for size in sizes.get("etcd-v2", []):
        for ep in size.episodes:
            if ep.label == "hard 1" and ep.seconds is not None:
                harness[size.nodes] = ep.seconds
    for row in validation:
        if not row.failed and row.reformation_s.harness is not None:
            harness[row.nodes] = row.reformation_s.harness
    rows = []
    kill = kill_case or {}
    d, r = median(kill.get("detect")), median(kill.get("rendezvous"))
    if d is not None and r is not None and 2 in harness:  # the recovery bench: the same 1:2 job, median of n
        real_s = round(d + r, 2)
        n_kills = (kill.get("recovery_s") or {}).get("n")
        rows.append(Recorded(2, real_s, harness[2], round(harness[2] - real_s, 2),
                             f"recovery bench etcd-v2/fast/kill-node, median of {n_kills}"))
    for job in real_jobs:
        detect, rendezvous = job.phases.get("detect"), job.phases.get("rendezvous")
        if job.ok and detect is not None and rendezvous is not None and job.nodes in harness:
            real_s = round(detect + rendezvous, 2)
            rows.append(Recorded(job.nodes, real_s, harness[job.nodes], round(harness[job.nodes] - real_s, 2),
                                 job.load_avg_1m))
    return rows

