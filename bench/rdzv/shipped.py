"""The sweep's sizes as the figures the toolkit ships (elastic_chaos/scale/measured.json, read by
`elastic-chaos scale`).

The lab writes, the toolkit reads: :func:`figures` turns the sizes (bench/rdzv/records.py) into
elastic_chaos.scale.figures.Figures -- per backend, per N, the figures ``elastic-chaos scale`` needs, which of them
this machine limited, where the harness broke, and a fitted model per figure (elastic_chaos.scale.model) -- and
:func:`derive` saves them, and the section's findings, on every write of results.json.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from bench.local_nodes import NodesRun
from bench.rdzv.findings import findings, lead_finding, recorded_finding
from bench.rdzv.records import SizeResult
from bench.rdzv.section import KEY, RdzvSection
from bench.rdzv.sweep import PRESET, where
from bench.rdzv.validate import VALIDATION_REPEAT, recorded
from elastic_chaos.scale.figures import (
    EPISODE_METRICS,
    STEADY_METRICS,
    STORE_WORK,
    BackendFigures,
    Figures,
    Point,
    save,
)
from elastic_chaos.scale.model import FitError, best_fit
from elastic_chaos.spec import preset

MIN_CLEAN_POINTS = 2
"""Fewer sizes than this unlimited by the machine, and a figure is fitted on every size (and says so: an
upper bound). With fewer than five, only the straight line is a candidate (elastic_chaos.scale.model.best_fit)."""


def derive(results: dict[str, Any], say: Callable[[str], None]) -> None:
    """The section's shipped figures and findings, from its sizes, for every path that writes results.json (a
    sweep, ``--render``): saved to elastic_chaos/scale/measured.json too. Nothing without a sweep."""
    section = RdzvSection.of(results)
    if not section.swept:
        return
    figs = figures(section.sizes, section)
    section = section.updated(figures=figs)
    rows = recorded(section.sizes, section.validation, (results.get("recovery") or {}).get("etcd-v2/fast/kill-node"),
                    [NodesRun.from_json(r) for r in results.get("scale") or ()])
    lead = lead_finding(section.validation, rows, keep_alive_s=float(preset(PRESET).keep_alive_interval or 1),
                        harness_kills=VALIDATION_REPEAT)
    results[KEY] = section.updated(findings=tuple(findings(section, figs) + recorded_finding(rows) + lead)).to_json()
    say(f"wrote {save(figs)}")


def figures(swept: Mapping[str, Sequence[SizeResult]], on: RdzvSection | None = None) -> Figures:
    """The shipped figures from the sweep's sizes (``on``: the section that recorded where they were measured;
    this machine, today, for what it does not say). Sizes not run are left out."""
    knobs, here, on = preset(PRESET), where(), on or RdzvSection.from_json({})
    return Figures(str(on.date if on.has("date") else here.date),
                   str(on.machine if on.has("machine") else here.machine),
                   int(on.cores if on.has("cores") and on.cores is not None else here.cores),
                   str(on.torch if on.has("torch") else here.torch), PRESET,
                   {"keep_alive_interval": int(knobs.keep_alive_interval or 5),
                    "keep_alive_max_attempt": int(knobs.keep_alive_max_attempt or 3),
                    "last_call_timeout": int(knobs.last_call_timeout or 30), "join_timeout": 600},
                   {b: backend_figures(b, run) for b, sizes in swept.items()
                    if (run := [s for s in sizes if not s.not_run])})


def point(size: SizeResult) -> Point:
    """A size as the figures keep it."""
    by_label = {e.label: e for e in size.episodes}
    values: dict[str, float | None] = {}
    limited = []
    for metric, label in EPISODE_METRICS.items():
        ep = by_label.get(label)
        values[metric] = ep.seconds if ep else None
        if ep and ep.limited:
            limited.append(metric)
    for key, label in STORE_WORK.items():
        ep = by_label.get(label)
        if ep and ep.seconds is not None and ep.has("store_ops"):
            values[f"{key}_store_ops"] = float(ep.store_ops)
            values[f"{key}_store_mb"] = round(ep.store_bytes / 1e6, 3)
            values[f"{key}_store_cpu_s"] = ep.store_cpu_s
            if ep.limited:
                limited += [f"{key}_store_ops", f"{key}_store_mb", f"{key}_store_cpu_s"]
    steady = size.steady
    if steady:
        values["store_ops_per_s"] = round(steady.ops, 1)
        values["store_bytes_per_s"] = steady.bytes_per_s
        values["store_cpu"] = steady.store_cpu
        values["agent_cpu"] = steady.agent_cpu
        if steady.limited:
            limited += list(STEADY_METRICS)
    return Point(size.nodes, values, tuple(limited), size.load_before, float(size.dilation or 1.0))


def backend_figures(backend: str, sizes: Sequence[SizeResult]) -> BackendFigures:
    """Points, fits (over the figures not limited by this machine) and where it broke, for one backend."""
    points = tuple(sorted((point(s) for s in sizes), key=lambda p: p.nodes))
    broken = sorted((s.nodes, str(s.broke)) for s in sizes if s.broke)
    fits = {}
    work = [f"{k}_store_{what}" for k in STORE_WORK for what in ("ops", "mb", "cpu_s")]
    for metric in [*EPISODE_METRICS, *STEADY_METRICS, *work]:
        measured = [(p.nodes, v, metric in p.limited) for p in points if (v := p.get(metric)) is not None]
        clean = [(n, v) for n, v, limited in measured if not limited]
        note = "fitted on the sizes this machine did not limit"
        if metric not in EPISODE_METRICS:  # counts and rates: a starved harness does less, never more, per second
            clean = []
        if len(clean) < MIN_CLEAN_POINTS:  # too few clean sizes for any model: every size, said so
            clean = [(n, v) for n, v, _ in measured]
            limited = sum(1 for *_, lim in measured if lim)
            bound = ": an upper bound" if metric in EPISODE_METRICS else ""
            note = (f"fitted on every size measured, {limited} of {len(measured)} limited by this machine"
                    f"{bound}") if limited else "fitted on every size measured"
        try:
            fits[metric] = replace(best_fit([n for n, _ in clean], [v for _, v in clean]), note=note)
        except FitError:
            continue
    return BackendFigures(backend, points, fits, broken[0][0] if broken else None, broken[0][1] if broken else None)
