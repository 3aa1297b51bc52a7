"""report.json (stable, versioned: other tools read it) and the recovery table.

Schema version 1, top level: ``schema_version``, ``scenario``, ``platform``,
``job``, ``verdict`` {``passed``, ``reasons``, ``checks``: each {``name``, ``ok``,
``reason``}}, ``faults`` (each: ``kind``,
``target``, ``injected_at``, ``metrics`` with at least detect_s,
rendezvous_s, recovery_s, regain_s, lost_steps, replacement_s,
world_size_before, world_size_after, resumed_from_step), ``goodput``
(analysis.goodput), ``split_brain`` (periods two worlds trained at once:
chaos.analysis.invariants), ``samples`` (exactly-once accounting: accounted,
exactly_once, committed/rolled-back steps, duplicate and gap counts),
``observation`` (a user script's job only, else null: where progress,
checkpoint saves and resumes were read from, and notes on what was
inferred or could not be measured: chaos.analysis.observation), ``started_at``,
``finished_at``, ``timeline`` and ``node_logs`` (paths relative to the
report folder). Additive changes keep the version; renames
bump it.

``write_report`` also writes the readable renderings beside report.json
(report.html, summary.md, timeline.png: chaos.reporting), from the folder
alone, so ``elastic-chaos report DIR`` re-renders exactly the same.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.analysis.recovery import PHASES

if TYPE_CHECKING:
    from chaos.runner.run import ChaosRun

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def build_report(run: ChaosRun) -> dict[str, Any]:
    verdict = run.verdict
    faults = []
    recoveries = run.recoveries()
    for record, rec in zip(run.faults, recoveries, strict=True):
        faults.append({**record.to_json(), "metrics": rec.to_json()})
    return {
        "schema_version": SCHEMA_VERSION,
        "scenario": run.scenario,
        "platform": run.platform.name,
        "job": run.job.to_json() if run.job else None,
        "verdict": verdict.to_json() if verdict else {"passed": False, "reasons": ["no verdict was reached"],
                                                      "checks": []},
        "faults": faults,
        "goodput": _rounded(run.goodput),
        "split_brain": [b.to_json() for b in run.split_brains()],
        "samples": _samples(run),
        "observation": run.observation(),
        "started_at": round(run.started_at, 3),
        "finished_at": round(time.time(), 3),
        "timeline": "timeline.jsonl",
        "node_logs": {name: str(path.relative_to(run.report_dir)) if path.is_relative_to(run.report_dir)
                      else str(path) for name, path in run.platform.node_logs().items()},
    }


def _rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _samples(run: ChaosRun) -> dict[str, Any]:
    acc = run.samples
    return {"accounted": acc.accounted, "exactly_once": acc.exactly_once,
            "committed_steps": acc.committed_steps, "rolled_back_steps": acc.rolled_back_steps,
            "duplicates": len(acc.duplicates), "gaps": len(acc.gaps), "summary": acc.summary()}


def write_report(run: ChaosRun) -> Path:
    path = run.report_dir / "report.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(build_report(run), indent=2) + "\n")
    tmp.replace(path)
    write_readable(run.report_dir)
    return path


def write_readable(report_dir: Path) -> Path | None:
    """report.html, summary.md (and timeline.png) beside report.json; returns the
    HTML path. A rendering failure is logged with the command that retries it,
    and never costs the run its report.json."""
    from chaos.reporting import render_folder
    try:
        result = render_folder(report_dir)
    except Exception as exc:  # noqa: BLE001 - report.json is written; the page must not fail the run
        log.warning("report.html could not be rendered (%s: %s); report.json is complete. "
                    "Retry with `elastic-chaos report %s`", type(exc).__name__, exc, report_dir)
        return None
    for note in result.notes:
        log.info(note)
    return result.html


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}{unit}"
    return f"{v}{unit}"


def render_table(report: dict[str, Any]) -> str:
    """The recovery table a person reads at the end of a run."""
    lines = []
    unit = ((report.get("observation") or {}).get("unit") or "step")
    header = ["fault", "target", *(f"{p}" for p in PHASES), "regain", f"lost {unit}s",
              "resumed from", "world size", "replacement"]
    rows = [header]
    for f in report.get("faults", []):
        m = f["metrics"]
        phases = m.get("phases") or {}
        rows.append([
            f["kind"], str(f.get("target")), *(_fmt(phases.get(p), "s") for p in PHASES),
            _fmt(m.get("regain_s"), "s"), _fmt(m.get("lost_steps")), _fmt(m.get("resumed_from_step")),
            f"{_fmt(m.get('world_size_before'))} -> {_fmt(m.get('world_size_after'))}"
            + (f" -> {m['world_size_final']}" if m.get("world_size_final") not in (None, m.get("world_size_after"))
               else ""),
            _fmt(m.get("replacement_s"), "s"),
        ])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    verdict = report.get("verdict", {})
    lines.append("")
    lines.append("verdict: " + ("PASSED" if verdict.get("passed") else "FAILED"))
    lines += [f"  {r}" for r in verdict.get("reasons", [])]
    for f in report.get("faults", []):
        for why in f["metrics"].get("missing") or []:
            lines.append(f"  note ({f['kind']} on {f.get('target')}): {why}")
    for why in (report.get("observation") or {}).get("notes") or []:
        lines.append(f"  note (script): {why}")
    return "\n".join(lines)
