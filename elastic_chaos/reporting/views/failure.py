"""What a failed scenario prints, and the metrics a test carries into JUnit XML.

A red CI job should say why without downloading anything: the failure
message gets the report folder and the slice of the timeline around the
fault(s) (progress folded to one line per run of steps), and every scenario
test carries its recovery metrics as JUnit ``<property>`` elements, so CI
dashboards can chart them over time. Which metrics each shows is declared with
the metric (``failure``, ``junit``: elastic_chaos.analysis.metrics).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from elastic_chaos.analysis import recovery
from elastic_chaos.analysis.recovery import Recovery
from elastic_chaos.analysis.recovery_analysis import RECOVERY
from elastic_chaos.analysis.registry import fault_groups, run_groups
from elastic_chaos.analysis.result import RunResult
from elastic_chaos.events import Event, ProgressEv, node_name, payload_json
from elastic_chaos.events.rdzv_events import RdzvState

MAX_LINES = 40
BEFORE_S = 3.0


def _describe(e: Event) -> str:
    data = {k: v for k, v in payload_json(e.data).items() if k not in ("spec", "heartbeats", "redundancy_list")}
    if isinstance(e.data, RdzvState):
        names, waiting = list(e.data.nodes()), list(e.data.nodes("wait_list"))
        text = f"round={data.get('round')} complete={data.get('complete')} participants={names}"
        return text + (f" waiting={waiting}" if waiting else "")
    text = ", ".join(f"{k}={v}" for k, v in data.items())
    return text[:160]


def timeline_slice(events: Sequence[Event], fault_times: Sequence[float], t0: float,
                   *, max_lines: int = MAX_LINES) -> str:
    """The events from a little before the first fault to the end (the last 30 s
    when there was no fault), one line each, runs of training steps folded."""
    if not events:
        return "(the timeline is empty)"
    end = max(e.t for e in events)
    start = min(fault_times) - BEFORE_S if fault_times else end - 30.0
    lines: list[str] = []
    steps: list[Event] = []

    def fold() -> None:
        if steps:
            first, last = steps[0], steps[-1]
            lines.append(f"  {_at(first.t - t0)}  progress   {len(steps)} step event(s): step "
                         f"{first.data.step} .. {last.data.step} "
                         f"(world size {last.data.world_size})")
            steps.clear()

    for e in sorted(events, key=lambda e: e.t):
        if e.t < start:
            continue
        if e.type == ProgressEv.STEP:
            steps.append(e)
            continue
        fold()
        lines.append(f"  {_at(e.t - t0)}  {e.type.source:<10} {e.type.name:<20} {e.node or '':<8} "
                     f"{_describe(e)}".rstrip())
    fold()
    if len(lines) > max_lines:
        half = max_lines // 2
        lines = [*lines[:half], f"  ... {len(lines) - max_lines} event line(s) omitted ...", *lines[-half:]]
    return "\n".join(lines)


def recovery_line(r: Recovery) -> str:
    """One fault's metrics declared ``failure=True``: its phases (those that apply), then
    the rest (``kill-node on node-1: detect 0.8s, ...; regain 51.1s, lost steps 10``)."""
    shown = [m for m in recovery.METRICS if m.failure and not (m.phase and m.key in r.not_applicable)]
    groups = [[m for m in shown if m.phase], [m for m in shown if not m.phase]]
    parts = [", ".join(f"{m.title()} {m.format(m.of(r))}" for m in group) for group in groups if group]
    return f"{r.fault} on {node_name(r.target)}: " + "; ".join(parts)


def failure_text(report_dir: Path, events: Sequence[Event], fault_times: Sequence[float],
                 t0: float, recoveries: Sequence[Recovery]) -> str:
    """The section a failed scenario adds to its failure message."""
    out = [f"report folder: {report_dir} (report.html is written when the test's job is torn down)"]
    for r in recoveries:
        out.append(recovery_line(r))
        out += [f"  missing: {m}" for m in r.missing]
        out += [f"  note: {m}" for m in r.notes]
    out.append("timeline (seconds since the run started)" + (" around the fault(s):" if fault_times else
                                                             ", last 30 s (no fault was injected):"))
    out.append(timeline_slice(events, fault_times, t0))
    return "\n".join(out)


def _at(offset: float) -> str:
    return f"+{offset:.1f}s".rjust(8)


def metric_properties(result: RunResult, html: Path | None) -> list[tuple[str, str]]:
    """A run's result as JUnit properties: ``chaos.verdict``, ``chaos.report``, and per fault
    ``chaos.fault<i>.kind``, ``.target`` and each metric of its groups declared ``junit=True``
    that was observed (the recovery's without a prefix: ``chaos.fault0.regain_s``,
    ``chaos.fault0.phase.detect_s``; another group's under its name: ``chaos.fault0.throughput.drop``),
    then each run group's (``chaos.replay.goodput``)."""
    props = [("chaos.verdict", "passed" if result.passed else "failed")]
    if html is not None:
        props.append(("chaos.report", str(html)))
    for i, fault in enumerate(result.faults):
        prefix = f"chaos.fault{i}"
        props += [(f"{prefix}.kind", fault.record.fault), (f"{prefix}.target", str(fault.record.target))]
        for g in fault_groups():
            value = fault.measured.get(g.name)
            if value is None:
                continue
            at = prefix if g.name == RECOVERY.name else f"{prefix}.{g.name}"
            props += [(f"{at}.{m.junit_key}", str(v)) for m in g.shown("junit") if (v := m.of(value)) is not None]
    for rg in run_groups():
        value = result.measured.get(rg.name)
        if value is not None:
            props += [(f"chaos.{rg.name}.{m.junit_key}", str(v)) for m in rg.shown("junit")
                      if (v := m.of(value)) is not None]
    return props
