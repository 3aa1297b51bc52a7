"""A run's metrics for dashboards: ``metrics.prom`` in the Prometheus text format, and a Pushgateway.

Every report folder gets ``metrics.prom`` (written by ``render_folder``, so a
crashed run's folder gets one from ``elastic-chaos report DIR`` too), made
with prometheus_client (``write_to_textfile``: node_exporter's textfile
collector reads it as it is) and never by hand. The families are derived
from the declared metrics (chaos.analysis.metrics): every metric of
``recovery.METRICS`` is a ``elastic_chaos_fault_*`` family (the phases one
``elastic_chaos_fault_phase_seconds`` family with a ``phase`` label), every
metric of chaos.analysis.throughput an ``elastic_chaos_straggler_*`` family,
every one of chaos.analysis.hang an ``elastic_chaos_hang_*`` family; a new
declaration shows up here with nothing else to write. Names and labels:
docs/REPORTS.md, "Metrics for dashboards".

A metric that was not observed has no sample (absent, never 0 or NaN).
``push`` sends the same registry to a Pushgateway, grouped by the run's folder
name, replacing what an earlier push of that run sent.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from chaos.analysis import hang, recovery, throughput
from chaos.analysis.metrics import Metric, Unit
from chaos.analysis.verdict import Check
from chaos.reporting.load import RunData
from chaos.reporting.result import FaultResult, RunResult

FILE = "metrics.prom"
PREFIX = "elastic_chaos"
RUN_LABELS = ("run", "scenario", "platform", "run_id")
"""Every family's labels: the report folder's name, the scenario, the platform, the job's rendezvous id."""
FAULT_LABELS = (*RUN_LABELS, "index", "fault", "target")
"""Per-fault families add: the fault's index in the run (0, 1, ...), its kind and its target node."""

_SUFFIX = {Unit.SECONDS: "_seconds", Unit.RATE: "_steps_per_second", Unit.FRACTION: "_ratio",
           Unit.STEPS: "", Unit.COUNT: ""}


def family_name(group: str, m: Metric) -> str:
    """The Prometheus name of declared metric ``m`` of ``group`` (fault, straggler, hang):
    the key without its ``_s`` plus the unit's base-unit suffix (``regain_s`` ->
    ``elastic_chaos_fault_regain_seconds``)."""
    base = m.key.removesuffix("_s") if m.unit is Unit.SECONDS else m.key
    return f"{PREFIX}_{group}_{base}{_SUFFIX[m.unit]}"


def _help(m: Metric) -> str:
    return f"{m.title()}: {m.help}"


class _Builder:
    """Gauges of one registry, created on first use (a family with no sample keeps its help)."""

    def __init__(self, run: dict[str, str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.run = run
        self._gauges: dict[str, Gauge] = {}

    def gauge(self, name: str, help: str, labels: Sequence[str]) -> Gauge:
        if name not in self._gauges:
            self._gauges[name] = Gauge(name, help, list(labels), registry=self.registry)
        return self._gauges[name]

    def set(self, name: str, help: str, value: float | int | None, **extra: str) -> None:
        g = self.gauge(name, help, [*RUN_LABELS, *extra])
        if value is not None:
            g.labels(**self.run, **extra).set(float(value))

    def declared(self, group: str, metrics: Iterable[Metric], values: Any, fault: dict[str, str]) -> None:
        for m in metrics:
            if m.phase:
                self.set(f"{PREFIX}_{group}_phase_seconds", f"a recovery phase: {', '.join(recovery.PHASES)} "
                         "(the phases that apply add up to regain)", m.of(values), **fault, phase=m.key)
            else:
                self.set(family_name(group, m), _help(m), getattr(values, m.key), **fault)


def registry(run: RunData) -> CollectorRegistry:
    """The run's metrics as a prometheus_client registry (see the module docstring)."""
    res = _result(run)
    job = res.job
    labels = {"run": run.folder.resolve().name, "scenario": res.scenario or "", "platform": res.platform or "",
              "run_id": job.run_id if job is not None else ""}
    b = _Builder(labels)
    _run_families(b, run)
    for i, f in enumerate(res.faults):
        fault = {"index": str(i), "fault": f.record.kind, "target": f.record.target or ""}
        _fault_families(b, f, fault)
    _replay_families(b, res.replay)
    return b.registry


def _result(run: RunData) -> RunResult:
    return run.result if run.result is not None else RunResult.from_json(run.report)


def _run_families(b: _Builder, run: RunData) -> None:
    res = _result(run)
    b.set(f"{PREFIX}_run_info", "1 for every run (its labels say which)", 1)
    b.set(f"{PREFIX}_run_complete", "1 when the run finished and wrote its report.json, 0 for a crashed or "
          "interrupted run", 1 if run.has_report_json and res.finished_at is not None else 0)
    b.set(f"{PREFIX}_run_passed", "1 when the hypothesis held, 0 when it did not (absent: no verdict reached)",
          None if res.verdict is None else int(res.passed))
    for name, ok in _checks(res.verdict.checks if res.verdict else []).items():
        b.set(f"{PREFIX}_check_passed", "1 when the verdict's named check held, 0 when it failed", int(ok),
              check=name)
    b.set(f"{PREFIX}_run_goodput_ratio", "useful step time / wall time of the run (docs/REPORTS.md, Goodput)",
          res.goodput)
    b.set(f"{PREFIX}_run_faults", "faults injected (or observed) in the run", len(res.faults))
    b.set(f"{PREFIX}_run_started_timestamp_seconds", "when the run started (Unix time)", res.started_at)
    b.set(f"{PREFIX}_run_finished_timestamp_seconds", "when the run finished (Unix time)", res.finished_at)
    b.set(f"{PREFIX}_run_wall_seconds", "how long the run took", None if res.started_at is None or
          res.finished_at is None else res.finished_at - res.started_at)


def _checks(checks: Sequence[Check]) -> dict[str, bool]:
    """Each check name with whether all of its checks held (skipped ones are left out)."""
    out: dict[str, bool] = {}
    for c in checks:
        if c.ok is not None:
            out[c.name] = out.get(c.name, True) and c.ok
    return out


def _fault_families(b: _Builder, f: FaultResult, fault: dict[str, str]) -> None:
    b.set(f"{PREFIX}_fault_injected_timestamp_seconds", "when the fault hit (Unix time)", f.record.injected_at,
          **fault)
    b.declared("fault", recovery.METRICS, f.recovery, fault)
    b.set(f"{PREFIX}_fault_recovered", "1 when training resumed after the fault, 0 when it did not",
          int(f.recovery.recovered), **fault)
    if f.throughput is not None or f.record.kind == "straggler":
        b.declared("straggler", throughput.METRICS, f.throughput or _Nothing(), fault)
    if f.hang is not None or f.record.kind == "hung-rank":
        b.declared("hang", hang.METRICS, f.hang or _Nothing(), fault)


class _Nothing:
    """Stands for a block that was not measured: every metric reads as not observed."""

    def __getattr__(self, name: str) -> None:
        return None


def _replay_families(b: _Builder, replay: dict[str, Any] | None) -> None:
    if replay is None:
        return
    for outcome in ("injected", "skipped"):
        b.set(f"{PREFIX}_replay_preemptions", "preemptions of the replayed trace, by what became of them",
              _num(replay.get(outcome)), outcome=outcome)
    b.set(f"{PREFIX}_replay_goodput_ratio", "goodput over the replay: what the trace left of the job's training "
          "time (chaos.analysis.replay)", _num(replay.get("goodput")))
    b.set(f"{PREFIX}_replay_max_late_seconds", "the latest a preemption hit after its compressed offset",
          _num(replay.get("max_late_s")))
    b.set(f"{PREFIX}_replay_compress", "time compression: trace seconds per second here",
          _num(replay.get("compress")))
    b.set(f"{PREFIX}_replay_checkpoint_every_steps", "the job's checkpoint interval during the replay",
          _num(replay.get("checkpoint_every")))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def write_metrics(run: RunData) -> Path:
    """Write ``metrics.prom`` into the run's folder (atomically); returns its path."""
    path = run.folder / FILE
    write_to_textfile(str(path), registry(run))
    return path


def push(run: RunData, gateway: str, *, job: str = "elastic-chaos", timeout_s: float = 10.0) -> None:
    """Push the run's metrics to the Pushgateway at ``gateway`` (``host:port`` or a URL), grouped by
    job and the run's folder name (an earlier push of this run is replaced). Raises OSError when the
    gateway cannot be reached or refuses."""
    push_to_gateway(gateway, job=job, registry=registry(run), grouping_key={"run": run.folder.resolve().name},
                    timeout=timeout_s)
