"""What a failed scenario prints, and the metrics a test carries into JUnit XML.

A red CI job should say why without downloading anything: the failure
message gets the report folder and the slice of the timeline around the
fault(s) (progress folded to one line per run of steps), and every scenario
test carries its recovery metrics as JUnit ``<property>`` elements, so CI
dashboards can chart them over time.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.analysis.recovery import PHASES
from chaos.events import Event, ProgressEv, Source

MAX_LINES = 40
BEFORE_S = 3.0
_METRICS = ("detect_s", "rendezvous_s", "recovery_s", "regain_s", "lost_steps", "resumed_from_step",
            "replacement_s", "world_size_before", "world_size_after", "world_size_final", "restarts_used")


def _describe(e: Event) -> str:
    data = {k: v for k, v in e.data.items() if k not in ("spec", "heartbeats", "redundancy_list")}
    if e.source == Source.RENDEZVOUS and "participants" in data:
        names = [p.get("node") or p.get("id") for p in data.get("participants") or [] if isinstance(p, dict)]
        waiting = [p.get("node") or p.get("id") for p in data.get("wait_list") or [] if isinstance(p, dict)]
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
                         f"{first.data.get('step')} .. {last.data.get('step')} "
                         f"(world size {last.data.get('world_size')})")
            steps.clear()

    for e in sorted(events, key=lambda e: e.t):
        if e.t < start:
            continue
        if e.type == ProgressEv.STEP:
            steps.append(e)
            continue
        fold()
        lines.append(f"  {_at(e.t - t0)}  {e.source:<10} {e.kind:<20} {e.node or '':<8} {_describe(e)}".rstrip())
    fold()
    if len(lines) > max_lines:
        half = max_lines // 2
        lines = [*lines[:half], f"  ... {len(lines) - max_lines} event line(s) omitted ...", *lines[-half:]]
    return "\n".join(lines)


def failure_text(report_dir: Path, events: Sequence[Event], fault_times: Sequence[float],
                 t0: float, recoveries: Sequence[dict[str, Any]]) -> str:
    """The section a failed scenario adds to its failure message."""
    out = [f"report folder: {report_dir} (report.html is written when the test's job is torn down)"]
    for r in recoveries:
        phases = r.get("phases") or {}
        parts = [f"{p} {_s(phases.get(p))}" for p in PHASES]
        out.append(f"{r.get('kind')} on {r.get('target')}: " + ", ".join(parts)
                   + f"; regain {_s(r.get('regain_s'))}, lost steps {_s(r.get('lost_steps'))}")
        out += [f"  missing: {m}" for m in r.get("missing") or []]
    out.append("timeline (seconds since the run started)" + (" around the fault(s):" if fault_times else
                                                             ", last 30 s (no fault was injected):"))
    out.append(timeline_slice(events, fault_times, t0))
    return "\n".join(out)


def _at(offset: float) -> str:
    return f"+{offset:.1f}s".rjust(8)


def _s(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}s" if isinstance(v, float) else str(v)


def metric_properties(report: dict[str, Any], html: Path | None) -> list[tuple[str, str]]:
    """report.json as JUnit properties: ``chaos.verdict``, ``chaos.report``, and per
    fault ``chaos.fault<i>.<metric>`` (seconds, steps, world sizes; phases too)."""
    props: list[tuple[str, str]] = []
    verdict = report.get("verdict") or {}
    props.append(("chaos.verdict", "passed" if verdict.get("passed") else "failed"))
    if html is not None:
        props.append(("chaos.report", str(html)))
    for i, fault in enumerate(report.get("faults") or []):
        m = fault.get("metrics") or {}
        prefix = f"chaos.fault{i}"
        props.append((f"{prefix}.kind", str(fault.get("kind"))))
        props.append((f"{prefix}.target", str(fault.get("target"))))
        for key in _METRICS:
            if m.get(key) is not None:
                props.append((f"{prefix}.{key}", str(m[key])))
        for phase, v in (m.get("phases") or {}).items():
            if v is not None:
                props.append((f"{prefix}.phase.{phase}_s", str(v)))
    return props
