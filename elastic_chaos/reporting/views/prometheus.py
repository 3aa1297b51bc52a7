"""A run's metrics for dashboards: ``metrics.prom`` in the Prometheus text format, and a Pushgateway.

Every report folder gets ``metrics.prom`` (written by ``render``, so a crashed run's
folder gets one from ``elastic-chaos report DIR`` too), made with prometheus_client
(``write_to_textfile``: node_exporter's textfile collector reads it as it is) and
never by hand. The families are derived from the metric groups
(elastic_chaos.analysis.groups): every metric of a fault group is an
``elastic_chaos_<prom>_<metric>`` family with the fault's labels (recovery's prefix
is ``fault``, a straggler's throughput ``straggler``, a hung rank's ``hang``; phases
are one ``elastic_chaos_<prom>_phase_seconds`` family with a ``phase`` label), every
metric of a run group an ``elastic_chaos_<prom>_<metric>`` family with the run's
labels (``replay``); a new group shows up here with nothing else to write. A group
that applies to a fault but measured nothing keeps its families with no sample.
Names and labels: docs/REPORTS.md, "Metrics for dashboards".

A metric that was not observed has no sample (absent, never 0 or NaN).
``push`` sends the same registry to a Pushgateway, grouped by the run's folder
name, replacing what an earlier push of that run sent.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from elastic_chaos.analysis.metrics import Metric, Unit
from elastic_chaos.analysis.registry import fault_groups, run_groups
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.verdict import Check
from elastic_chaos.reporting.run_report import RunReport

FILE = "metrics.prom"
PREFIX = "elastic_chaos"
RUN_LABELS = ("run", "scenario", "platform", "run_id")
"""Every family's labels: the report folder's name, the scenario, the platform, the job's rendezvous id."""
FAULT_LABELS = (*RUN_LABELS, "index", "fault", "target")
"""Per-fault families add: the fault's index in the run (0, 1, ...), its kind and its target node."""

_SUFFIX = {Unit.SECONDS: "_seconds", Unit.RATE: "_steps_per_second", Unit.FRACTION: "_ratio",
           Unit.STEPS: "", Unit.COUNT: "", Unit.FACTOR: "", Unit.HOURS: "", Unit.GPU_HOURS: "",
           Unit.USD: "", Unit.USD_PER_GPU_HOUR: "",   # the cost group's keys carry their units
           Unit.MILLISECONDS: "", Unit.MBIT_S: ""}    # so do the link group's (rtt_ms, mbit_measured)


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

    def declared(self, group: str, metrics: Iterable[Metric], values: Any, labels: dict[str, str]) -> None:
        phases = [m.key for m in metrics if m.phase]
        for m in metrics:
            value = None if values is None else m.of(values)
            if m.phase:
                self.set(f"{PREFIX}_{group}_phase_seconds", f"a phase: {', '.join(phases)} (the phases that apply "
                         "add up to regain)", value, **labels, phase=m.key)
            else:
                self.set(family_name(group, m), _help(m), value, **labels)


def registry(run: RunReport) -> CollectorRegistry:
    """The run's metrics as a prometheus_client registry (see the module docstring)."""
    res = run.result
    job = res.job
    labels = {"run": run.folder.resolve().name, "scenario": res.scenario or "", "platform": res.platform or "",
              "run_id": job.run_id if job is not None else ""}
    b = _Builder(labels)
    _run_families(b, run)
    for i, f in enumerate(res.faults):
        fault = {"index": str(i), "fault": f.record.fault, "target": f.record.target or ""}
        _fault_families(b, f, fault)
    for g in run_groups():
        value = res.measured.get(g.name)
        if value is not None:
            b.declared(g.prom, g.metrics, value, {})
    return b.registry


def _run_families(b: _Builder, run: RunReport) -> None:
    res = run.result
    b.set(f"{PREFIX}_run_info", "1 for every run (its labels say which)", 1)
    b.set(f"{PREFIX}_run_complete", "1 when the run finished and wrote its report.json, 0 for a crashed or "
          "interrupted run", 1 if run.complete and res.finished_at is not None else 0)
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
    for g in fault_groups():
        if g.applies(f.record.fault):
            b.declared(g.prom, g.metrics, f.measured.get(g.name), fault)
    b.set(f"{PREFIX}_fault_recovered", "1 when training resumed after the fault, 0 when it did not",
          int(f.recovery.recovered), **fault)


def write_metrics(run: RunReport) -> Path:
    """Write ``metrics.prom`` into the run's folder (atomically); returns its path."""
    path: Path = run.folder / FILE
    write_to_textfile(str(path), registry(run))
    return path


def push(run: RunReport, gateway: str, *, job: str = "elastic-chaos", timeout_s: float = 10.0) -> None:
    """Push the run's metrics to the Pushgateway at ``gateway`` (``host:port`` or a URL), grouped by
    job and the run's folder name (an earlier push of this run is replaced). Raises OSError when the
    gateway cannot be reached or refuses."""
    push_to_gateway(gateway, job=job, registry=registry(run), grouping_key={"run": run.folder.resolve().name},
                    timeout=timeout_s)
