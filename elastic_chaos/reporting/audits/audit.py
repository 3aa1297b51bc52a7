"""Audit many runs at once: per fault kind and platform, what recovery costs.

The question an audit answers: "what happens to our jobs when a spot node
goes away, and what does it cost us?", over a CI history or a game day rather
than one run. Definitions (docs/REPORTS.md has the worked examples):

- A *group* is one (fault kind, platform). A run with two fault kinds counts
  in both groups; each injected fault is one sample of its group's metrics.
- *Pass rate*: runs whose verdict passed / runs in the group. A run without a
  verdict (crashed, no report.json) counts as not passed.
- *Not counted*: a folder whose report.json or timeline cannot be read (garbage,
  a folder in a file's place, a field of the wrong type) is skipped and listed
  with why, and so is a run a usage error stopped (no run was made); a run whose
  outcome is ``not_steady`` or ``toolkit_error`` is listed apart: neither is a
  verdict on the hypothesis, so neither is in any group's pass rate, percentiles
  or score (:func:`survey`).
- *Metrics*: those of every fault group (elastic_chaos.analysis.groups) declared with
  ``audit=True`` (today the recovery's phases, regain and lost steps), by their short
  name (``regain``).
- *Percentiles* are nearest-rank, no interpolation (elastic_chaos.analysis.stats): p-th percentile of n
  sorted values is the value at rank ceil(p/100 x n) (1-based). Every number
  shown was actually measured; p50 of [1, 2, 3, 4] is 2, p95 of 10 values is
  the largest. Faults where a metric was not observed are left out of that
  metric (``n`` says how many were used).
- *Goodput* per run: useful step time / wall time (elastic_chaos.reporting.views.series);
  a group shows the p50 over its runs.
- *Resilience score* 0..100: ``100 x pass_rate x mean(fault_score)`` with
  ``fault_score = H / (H + regain_s)``, H = 60 s (``score_half_s``): a fault
  that regains progress at once scores 1, one that costs H seconds scores
  1/2, one that never regains progress scores 0.
- *Regression* against a baseline run set, per group present in both: the
  pass rate dropped; or a metric's p50 grew by more than ``tolerance``
  (default 20%) and by at least ``min_delta_s`` seconds (1 s; a count such as
  lost steps: by at least 1); or the score fell by more than 5 points.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.cost import fault_cost, interrupts
from elastic_chaos.analysis.metrics import Metric, Unit
from elastic_chaos.analysis.registry import fault_groups
from elastic_chaos.analysis.result import REPORT, TIMELINE, FaultResult
from elastic_chaos.analysis.stats import Stat
from elastic_chaos.analysis.verdict import Outcome
from elastic_chaos.errors import SpecError
from elastic_chaos.events.runner_events import CostBasisGiven
from elastic_chaos.reporting.load import load_run


def audited() -> dict[str, Metric]:
    """The metrics of every fault group declared ``audit=True``, by short name (``regain``), in
    declaration order."""
    return {m.name: m for g in fault_groups() for m in g.shown("audit")}


def measured_metrics(groups: Sequence[Group]) -> list[Metric]:
    """The audited metrics an audit of ``groups`` shows: the recovery's always, another group's (an
    interruption's cost) only where some fault of ``groups`` has it (runs given no price: no cost)."""
    recovery = {m.name for g in fault_groups() if g.name == "recovery" for m in g.shown("audit")}
    return [m for m in audited().values() if m.name in recovery or any(g.stat(m.name).n for g in groups)]


def _group_of(metric: str) -> str:
    return next(g.name for g in fault_groups() if any(m.name == metric for m in g.shown("audit")))

SCORE_HALF_S = 60.0
SCORE_DROP = 5.0


@dataclass(frozen=True)
class RunSummary:
    """One run as the audit sees it."""

    folder: Path
    platform: str
    passed: bool | None
    faults: tuple[FaultResult, ...]
    goodput: float | None
    missing: tuple[str, ...]
    outcome: Outcome | None = None
    """What the run came to (None: no verdict was reached, a crashed run)."""
    why: str = ""
    """The first failed check's reason (for a run listed apart)."""

    @property
    def judged(self) -> bool:
        """Whether the run is a verdict on its hypothesis (or a crash without one): counted in groups."""
        return self.outcome is None or self.outcome.judges_hypothesis


@dataclass(frozen=True)
class Skipped:
    """A folder the audit could not count as a run, and why."""

    folder: Path
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"folder": str(self.folder), "reason": self.reason}


def fault_metric(f: FaultResult, metric: str) -> float | None:
    """The audited ``metric`` (a short name: ``regain``) of one fault; None when not observed."""
    value = f.measured.get(_group_of(metric))
    v = None if value is None else audited()[metric].of(value)
    return None if v is None else float(v)


@dataclass
class Group:
    fault: str
    platform: str
    runs: list[RunSummary] = field(default_factory=list)
    faults: list[FaultResult] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.fault, self.platform

    @property
    def passed(self) -> int:
        return sum(1 for r in self.runs if r.passed is True)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.runs) if self.runs else 0.0

    @property
    def incomplete(self) -> int:
        return sum(1 for r in self.runs if r.passed is None)

    def stat(self, metric: str) -> Stat:
        values = [v for f in self.faults if (v := fault_metric(f, metric)) is not None]
        return Stat.of(values)

    @property
    def goodput(self) -> Stat:
        return Stat.of([r.goodput for r in self.runs if r.goodput is not None])

    def score(self, half_s: float = SCORE_HALF_S) -> float:
        if not self.faults:
            return 0.0
        scores = []
        for f in self.faults:
            regain = fault_metric(f, "regain")
            scores.append(0.0 if regain is None else half_s / (half_s + max(0.0, regain)))
        return 100.0 * self.pass_rate * sum(scores) / len(scores)

    def to_json(self, half_s: float = SCORE_HALF_S) -> dict[str, Any]:
        return {"fault": self.fault, "platform": self.platform, "runs": len(self.runs),
                "faults": len(self.faults), "passed": self.passed, "incomplete": self.incomplete,
                "pass_rate": self.pass_rate, "score": round(self.score(half_s), 1),
                "goodput": self.goodput.to_json(),
                "metrics": {m.name: self.stat(m.name).to_json() for m in measured_metrics([self])},
                "run_folders": [str(r.folder) for r in self.runs]}


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Report folders: each path itself when it is one, else every folder under it
    holding report.json or timeline.jsonl. Raises SpecError for a path that does not exist."""
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise SpecError(f"{path} does not exist; pass report folders or folders holding them "
                            "(e.g. reports/)")
        if (path / REPORT).exists() or (path / TIMELINE).exists():
            found.append(path)
            continue
        marks = sorted({*path.rglob(REPORT), *path.rglob(TIMELINE)})
        found += [m.parent for m in marks]
    out: list[Path] = []
    for p in found:
        if p.resolve() not in {q.resolve() for q in out}:
            out.append(p)
    return out


def summarize_run(folder: Path, basis: CostBasisGiven | None = None) -> RunSummary:
    """One run as the audit sees it; ``basis``: price every interruption with it (elastic_chaos.analysis.cost),
    in place of what the run was given. Raises SpecError (ReportUnreadable: file, line, why) for a
    folder whose report.json or timeline cannot be read."""
    run = load_run(folder, strict=True)
    verdict = run.result.verdict
    why = next((c.reason for c in verdict.checks if c.ok is False), "") if verdict is not None else ""
    faults = tuple(run.faults)
    if basis is not None:
        nproc = run.result.job.nproc_per_node if run.result.job is not None else None
        faults = tuple(_priced(f, basis, nproc) for f in faults)
    return RunSummary(folder=folder, platform=run.platform, passed=run.passed, faults=faults,
                      goodput=run.result.goodput, missing=tuple(run.missing),
                      outcome=verdict.outcome if verdict is not None else None, why=why)


def _priced(f: FaultResult, basis: CostBasisGiven, nproc_per_node: int | None) -> FaultResult:
    measured = {k: v for k, v in f.measured.items() if k != "cost"}
    if not interrupts(measured):
        return FaultResult(f.record, measured)
    r = f.recovery
    value = fault_cost(basis, r.regain_s, r.world_size_before, nproc_per_node)
    return FaultResult(f.record, measured if value is None else {**measured, "cost": value})


def survey(folders: Iterable[Path], basis: CostBasisGiven | None = None) -> tuple[list[RunSummary], list[Skipped]]:
    """Every folder summarized (priced with ``basis`` when given), or skipped with why: one that cannot be
    read, and one that a usage error stopped (no run was made). Never raises for a single folder."""
    runs: list[RunSummary] = []
    skipped: list[Skipped] = []
    for folder in folders:
        try:
            run = summarize_run(folder, basis)
        except SpecError as exc:
            skipped.append(Skipped(folder, str(exc)))
            continue
        if run.outcome is Outcome.USAGE_ERROR:
            skipped.append(Skipped(folder, f"not a run: {run.why}"))
        else:
            runs.append(run)
    return runs, skipped


def aggregate(runs: Sequence[RunSummary]) -> list[Group]:
    """The groups of the runs that judge their hypothesis (runs listed apart are left out)."""
    groups: dict[tuple[str, str], Group] = {}
    for run in runs:
        if not run.judged:
            continue
        kinds_seen: set[str] = set()
        for f in run.faults:
            g = groups.setdefault((f.fault, run.platform), Group(f.fault, run.platform))
            g.faults.append(f)
            if f.fault not in kinds_seen:
                g.runs.append(run)
                kinds_seen.add(f.fault)
    return sorted(groups.values(), key=lambda g: g.key)


@dataclass(frozen=True)
class Regression:
    fault: str
    platform: str
    what: str
    baseline: float
    current: float

    def describe(self) -> str:
        if self.what == "pass rate":
            return (f"{self.fault} on {self.platform}: pass rate {self.current:.0%} "
                    f"(baseline {self.baseline:.0%})")
        if self.what == "score":
            return f"{self.fault} on {self.platform}: score {self.current:.0f} (baseline {self.baseline:.0f})"
        unit = "s" if audited()[self.what].unit is Unit.SECONDS else ""
        return (f"{self.fault} on {self.platform}: {self.what} p50 {self.current:g}{unit} "
                f"(baseline {self.baseline:g}{unit}, +{self.current - self.baseline:.1f}{unit})")


def compare(current: Sequence[Group], baseline: Sequence[Group], *, tolerance: float = 0.2,
            min_delta_s: float = 1.0, half_s: float = SCORE_HALF_S) -> list[Regression]:
    """Regressions of ``current`` against ``baseline``, for groups present in both."""
    base = {g.key: g for g in baseline}
    out: list[Regression] = []
    for g in current:
        b = base.get(g.key)
        if b is None:
            continue
        if g.pass_rate < b.pass_rate:
            out.append(Regression(g.fault, g.platform, "pass rate", b.pass_rate, g.pass_rate))
        for metric in audited():
            now, then = g.stat(metric).p50, b.stat(metric).p50
            if now is None or then is None:
                continue
            min_delta = min_delta_s if audited()[metric].unit is Unit.SECONDS else 1.0
            if now > then * (1 + tolerance) and now - then >= min_delta:
                out.append(Regression(g.fault, g.platform, metric, then, now))
        if g.score(half_s) < b.score(half_s) - SCORE_DROP:
            out.append(Regression(g.fault, g.platform, "score", b.score(half_s), g.score(half_s)))
    return out
