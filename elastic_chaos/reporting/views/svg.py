"""The timeline picture and the per-fault phase bars, as inline SVG.

Hand-written SVG keeps report.html one self-contained file (no chart library,
no CDN, nothing fetched). Every mark carries a ``<title>``, which browsers
show on hover, so the picture explains itself without JavaScript; the page's
small script only adds a time readout under the pointer.

Lanes, top to bottom, sharing one time axis (seconds since the run started):
training step per worker process, recovery phases per fault, rendezvous
rounds, one lifetime bar per node, world size. Faults are red vertical lines
across all lanes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from elastic_chaos.analysis.recovery import PHASES
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.events import FaultEv, NodeEv, node_name
from elastic_chaos.reporting.views.series import Marker, Series
from elastic_chaos.reporting.views.text import escape

PHASE_COLORS = {"detect": "#f2a541", "exit": "#e84393", "shutdown": "#8d6e63", "rendezvous": "#6c5ce7",
                "restart": "#00a8a8", "retrain": "#e17055", "stall": "#95a5a6"}
NODE_COLORS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FAULT_COLOR = "#d62728"

WIDTH = 1100
LEFT, RIGHT = 120, 24
STEP_H, PHASE_H, RDZV_H, NODE_H, WS_H, AXIS_H, TOP = 230, 24, 30, 18, 56, 30, 26


def node_color(nodes: Sequence[str], node: str) -> str:
    return NODE_COLORS[nodes.index(node) % len(NODE_COLORS)] if node in nodes else "#555555"


def _f(v: float) -> str:
    return f"{v:.1f}"


def _t(text: str) -> str:
    return f"<title>{escape(text)}</title>"


class _Scale:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0 = t0
        self.t1 = max(t1, t0 + 1.0)

    def x(self, t: float) -> float:
        return LEFT + (t - self.t0) / (self.t1 - self.t0) * (WIDTH - LEFT - RIGHT)


def nice_step(span: float, target: int = 10) -> float:
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


MAX_POINTS = 1500


def thin(points: Sequence[tuple[float, int]], limit: int = MAX_POINTS) -> Sequence[tuple[float, int]]:
    """At most ``limit`` points of a long series (every k-th, first and last kept):
    an hour of steps stays a page of kilobytes, not megabytes."""
    if len(points) <= limit:
        return points
    k = math.ceil(len(points) / limit)
    out = list(points[::k])
    if out[-1] != points[-1]:
        out.append(points[-1])
    return out


def timeline_svg(series: Series, faults: Sequence[FaultResult], t0: float, t1: float) -> str:
    """The whole timeline picture as one ``<svg>`` element."""
    sx = _Scale(t0, t1)
    nodes = series.nodes
    y = TOP
    parts: list[str] = []
    parts.append(_steps_lane(series, sx, y, nodes))
    y += STEP_H
    phase_h = phase_lane_height(len(faults))
    parts.append(_lane_label("recovery", y, phase_h))
    parts.append(_phase_lane(faults, sx, y))
    y += phase_h
    parts.append(_lane_label("rendezvous", y, RDZV_H))
    parts.append(_rounds_lane(series, sx, y))
    y += RDZV_H
    for node in nodes:
        parts.append(_lane_label(node, y, NODE_H))
        parts.append(_node_lane(series, node, sx, y, nodes))
        y += NODE_H
    parts.append(_lane_label("world size", y, WS_H))
    parts.append(_ws_lane(series, sx, y))
    y += WS_H
    parts.append(_axis(sx, y))
    height = y + AXIS_H
    parts.append(_fault_lines(series, faults, sx, height - AXIS_H))
    parts.append(f'<line class="cursor" x1="-10" x2="-10" y1="{TOP}" y2="{y}" stroke="#999" '
                 'stroke-dasharray="2,2" pointer-events="none"/>'
                 f'<text class="cursor-label" x="-100" y="{TOP - 8}" font-size="11" fill="#333"></text>')
    return (f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="run timeline" '
            f'data-x0="{LEFT}" data-x1="{WIDTH - RIGHT}" data-t0="0" data-t1="{_f(sx.t1 - sx.t0)}" '
            f'font-family="sans-serif">' + "".join(parts) + "</svg>")


def _lane_label(text: str, y: float, h: float) -> str:
    return (f'<text x="{LEFT - 8}" y="{_f(y + h / 2 + 4)}" text-anchor="end" font-size="11" '
            f'fill="#444">{escape(text)}</text>'
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_f(y)}" y2="{_f(y)}" stroke="#eee"/>')


def _steps_lane(series: Series, sx: _Scale, top: float, nodes: Sequence[str]) -> str:
    max_step = max(series.max_step, 1)
    bottom = top + STEP_H - 8

    def y(step: float) -> float:
        return bottom - step / max_step * (STEP_H - 16)

    out = [f'<text x="{LEFT - 8}" y="{_f(top + 10)}" text-anchor="end" font-size="11" fill="#444">'
           f'step {max_step}</text>',
           f'<text x="{LEFT - 8}" y="{_f(bottom)}" text-anchor="end" font-size="11" fill="#444">0</text>',
           f'<text x="14" y="{_f(top + STEP_H / 2)}" font-size="12" fill="#222" '
           f'transform="rotate(-90 14 {_f(top + STEP_H / 2)})" text-anchor="middle">training step</text>',
           f'<rect x="{LEFT}" y="{_f(top)}" width="{WIDTH - LEFT - RIGHT}" height="{STEP_H - 4}" '
           'fill="#fafafa" stroke="#ddd"/>']
    for s in series.steps:
        # ranks in lockstep overlap: earlier nodes drawn wider, so every line stays visible
        width = max(1.5, 4.5 - 1.5 * (nodes.index(s.node) if s.node in nodes else 0))
        for part in _split_at_pauses(s.points, series.pauses):   # no line drawn across a pause
            pts = " ".join(f"{_f(sx.x(t))},{_f(y(step))}" for t, step in thin(part))
            first, last = part[0], part[-1]
            tip = (f"{s.label}: steps {first[1]}..{last[1]} from +{first[0] - sx.t0:.1f}s "
                   f"to +{last[0] - sx.t0:.1f}s")
            out.append(f'<polyline class="series" points="{pts}" fill="none" stroke-width="{width:g}" '
                       f'stroke="{node_color(nodes, s.node)}" data-node="{escape(s.node)}">{_t(tip)}</polyline>')
    for t, step, kind in series.checkpoints:
        color = {"saved": "#555", "loaded": "#2ca02c", "corrupt": FAULT_COLOR}.get(kind, "#555")
        out.append(f'<circle cx="{_f(sx.x(t))}" cy="{_f(y(step))}" r="3.5" fill="{color}">'
                   f'{_t(f"checkpoint {kind}: step {step} at +{t - sx.t0:.1f}s")}</circle>')
    return "".join(out)


def _split_at_pauses(points: Sequence[tuple[float, int]],
                     pauses: Sequence[tuple[float, float]]) -> list[Sequence[tuple[float, int]]]:
    """``points`` cut where two neighbours lie on either side of a pause (no step of any worker):
    a script's steps are one series per node, which a restart does not end."""
    parts: list[Sequence[tuple[float, int]]] = []
    start = 0
    for i in range(1, len(points)):
        a, b = points[i - 1][0], points[i][0]
        if any(a <= p0 + 1e-6 and b >= p1 - 1e-6 for p0, p1 in pauses):
            parts.append(points[start:i])
            start = i
    parts.append(points[start:])
    return [p for p in parts if p]


ROW_H = 12


def phase_lane_height(n_faults: int) -> int:
    """One row per fault (phases of overlapping recoveries must not hide each other)."""
    return PHASE_H if n_faults <= 1 else 8 + ROW_H * n_faults


def _phase_lane(faults: Sequence[FaultResult], sx: _Scale, top: float) -> str:
    out = []
    bar_h = PHASE_H - 8 if len(faults) <= 1 else ROW_H - 2
    for i, f in enumerate(faults):
        t = f.measured_from   # the phases count from there (a notice acted on: before the fault)
        y = top + 4 + (0 if len(faults) <= 1 else i * ROW_H)
        for name, d in f.phases.items():
            if d is None:
                break
            out.append(f'<rect class="phase" x="{_f(sx.x(t))}" y="{_f(y)}" '
                       f'width="{_f(max(sx.x(t + d) - sx.x(t), 1.0))}" height="{bar_h}" '
                       f'fill="{PHASE_COLORS[name]}">'
                       f'{_t(f"{f.fault} on {node_name(f.target)}: {name} {d:.1f}s")}</rect>')
            t += d
    return "".join(out)


def _rounds_lane(series: Series, sx: _Scale, top: float) -> str:
    out = []
    mid = top + RDZV_H / 2
    for r in series.rounds:
        x = sx.x(r.t)
        label = (f"r{r.round}" if r.round is not None and r.round >= 0 else "round") + f": {len(r.nodes)}"
        tip = (f"rendezvous {'round ' + str(r.round) if r.round is not None else 'round'} complete at "
               f"+{r.t - sx.t0:.1f}s ({r.source}): {', '.join(r.nodes)}")
        out.append(f'<g class="round"><path d="M{_f(x)},{_f(mid - 6)} l6,6 l-6,6 l-6,-6 z" fill="#6c5ce7"/>'
                   f'<text x="{_f(x + 8)}" y="{_f(mid + 4)}" font-size="10" fill="#333">{escape(label)}</text>'
                   f'{_t(tip)}</g>')
    return "".join(out)


def _node_lane(series: Series, node: str, sx: _Scale, top: float, nodes: Sequence[str]) -> str:
    out = []
    for lt in series.lifetimes:
        if lt.node != node:
            continue
        x0, x1 = sx.x(lt.start), sx.x(lt.end)
        tip = (f"{node}: started +{lt.start - sx.t0:.1f}s"
               + (f" replacing {lt.replaces}" if lt.replaces else "")
               + f", {lt.ended} +{lt.end - sx.t0:.1f}s")
        out.append(f'<rect x="{_f(x0)}" y="{_f(top + 4)}" width="{_f(max(x1 - x0, 1.0))}" height="{NODE_H - 8}" '
                   f'rx="3" fill="{node_color(nodes, node)}" opacity="0.75">{_t(tip)}</rect>')
        if lt.ended == NodeEv.LOST.name:
            out.append(f'<text x="{_f(x1 + 2)}" y="{_f(top + NODE_H - 4)}" font-size="11" '
                       f'fill="{FAULT_COLOR}">lost</text>')
    marks = [m for m in series.node_marks if m.node == node]
    for m in marks:
        x = sx.x(m.t)
        tip = f"{node}: {m.event}" + (f" ({m.detail})" if m.detail else "") + f" at +{m.t - sx.t0:.1f}s"
        out.append(f'<path class="node-mark" d="M{_f(x)},{_f(top + 1)} l5,8 l-5,8 l-5,-8 z" fill="#f2a541" '
                   f'stroke="#8a5a00" stroke-width="0.8">{_t(tip)}</path>')
    # labels after the marks (drawn on top); marks closer than a label's width share one label
    groups: list[tuple[float, list[str]]] = []
    for m in marks:
        x, label = sx.x(m.t), _mark_label(m)
        if groups and x - groups[-1][0] < 6 + 5.5 * len(", ".join(groups[-1][1])):
            if label not in groups[-1][1]:
                groups[-1][1].append(label)
        else:
            groups.append((x, [label]))
    for x, labels in groups:
        text = _join_labels(labels)
        out.append(f'<text class="node-mark-label" x="{_f(x + 6)}" y="{_f(top + 12)}" font-size="10" '
                   f'fill="#5a3a00" stroke="#fff" stroke-width="3" paint-order="stroke">{escape(text)}</text>')
    return "".join(out)


def _join_labels(labels: list[str]) -> str:
    """``notice: rebalance`` + ``notice: interruption`` -> ``notice: rebalance, interruption``."""
    out: list[str] = []
    for label in labels:
        kind, _, detail = label.partition(": ")
        if out and detail and out[-1].startswith(kind + ": "):
            out[-1] += f", {detail}"
        else:
            out.append(label)
    return "; ".join(out)


def _mark_label(m: Marker) -> str:
    """A node event's short name on the lane: ``notice: interruption``, ``frozen``."""
    detail = m.detail.split(",")[0].split("=")[-1].strip() if m.event == "notice" and m.detail else ""
    return f"{m.event}: {detail}" if detail else m.event


def _ws_lane(series: Series, sx: _Scale, top: float) -> str:
    if not series.world_size:
        return (f'<text x="{LEFT + 6}" y="{_f(top + WS_H / 2)}" font-size="11" fill="#999">'
                "no training step observed</text>")
    max_ws = max(max(ws for _, ws in series.world_size), 1)

    def y(ws: int) -> float:
        return top + WS_H - 6 - ws / max_ws * (WS_H - 16)

    d = []
    prev_ws: int | None = None
    for t, ws in series.world_size:
        x = sx.x(t)
        d.append(f"M{_f(x)},{_f(y(ws))}" if prev_ws is None else f"H{_f(x)}V{_f(y(ws))}")
        prev_ws = ws
    labels = "".join(f'<text x="{_f(sx.x(t) + 3)}" y="{_f(y(ws) - 3)}" font-size="10" fill="#333">{ws}</text>'
                     for (t, ws), prev in zip(series.world_size, [(0.0, -1), *series.world_size], strict=False)
                     if ws != prev[1])
    # a pause is not a world of 0: the job is between two worlds; the line is hidden under a band
    bands = "".join(
        f'<g class="pause"><rect x="{_f(sx.x(a))}" y="{_f(top + 2)}" width="{_f(max(sx.x(b) - sx.x(a), 1.0))}" '
        f'height="{WS_H - 6}" fill="#eeeeee" stroke="#bbb" stroke-dasharray="3,2"/>'
        f'<text x="{_f((sx.x(a) + sx.x(b)) / 2)}" y="{_f(top + WS_H / 2 + 3)}" font-size="10" fill="#666" '
        f'text-anchor="middle">no training: between two worlds</text>'
        f'{_t(f"no step from +{a - sx.t0:.1f}s to +{b - sx.t0:.1f}s: detecting, re-forming and restarting")}</g>'
        for a, b in series.pauses)
    return (f'<path class="world-size" d="{"".join(d)}" fill="none" stroke="#333" stroke-width="1.5">'
            f'{_t("world size: ranks training")}</path>' + bands + labels)


def _axis(sx: _Scale, y: float) -> str:
    span = sx.t1 - sx.t0
    step = nice_step(span)
    out = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_f(y)}" y2="{_f(y)}" stroke="#333"/>']
    k = 0
    while k * step <= span + 1e-9:
        x = LEFT + k * step / span * (WIDTH - LEFT - RIGHT)
        out.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(y)}" y2="{_f(y + 5)}" stroke="#333"/>'
                   f'<text x="{_f(x)}" y="{_f(y + 17)}" font-size="10" text-anchor="middle" fill="#333">'
                   f'{k * step:g}s</text>')
        k += 1
    out.append(f'<text x="{WIDTH - RIGHT}" y="{_f(y + 28)}" font-size="10" text-anchor="end" fill="#666">'
               "seconds since the run started</text>")
    return "".join(out)


def _fault_lines(series: Series, faults: Sequence[FaultResult], sx: _Scale, bottom: float) -> str:
    out = []
    last_x, row = -1e9, 0
    for f in faults:
        x = sx.x(f.injected_at)
        label = f"{f.fault} → {f.target}" if f.target else f.fault
        row = row + 1 if x - last_x < 7 * len(label) else 0  # stagger labels that would overlap
        last_x = x
        how = "observed" if f.observed else "injected"
        out.append(f'<g class="fault"><line x1="{_f(x)}" x2="{_f(x)}" y1="{TOP - 4}" y2="{_f(bottom)}" '
                   f'stroke="{FAULT_COLOR}" stroke-width="2" stroke-dasharray="6,3"/>'
                   f'<text x="{_f(x + 4)}" y="{TOP + 8 + 14 * (row % 4)}" font-size="12" font-weight="bold" '
                   f'fill="{FAULT_COLOR}">{escape(label)}</text>'
                   f'{_t(f"{label} {how} at +{f.injected_at - sx.t0:.1f}s")}</g>')
    for m in series.markers:
        if m.event == FaultEv.INJECTED.name:  # markers are fault events; the faults are drawn above
            continue
        x = sx.x(m.t)
        tip = f"fault {m.fault}: {m.event}" + (f" on {m.node}" if m.node else "") + \
            (f" ({m.detail})" if m.detail else "") + f" at +{m.t - sx.t0:.1f}s"
        out.append(f'<g class="fault-marker"><path d="M{_f(x - 5)},{TOP - 10} h10 l-5,8 z" fill="{FAULT_COLOR}"/>'
                   f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{TOP - 2}" y2="{_f(bottom)}" stroke="{FAULT_COLOR}" '
                   f'stroke-width="1" opacity="0.4"/>{_t(tip)}</g>')
    return "".join(out)


def phase_bars_svg(bars: Sequence[tuple[str, dict[str, float | None]]], *, svg_id: str = "phase-bars") -> str:
    """One horizontal stacked bar per (label, phases): the phases that apply, in order
    (elastic_chaos.analysis.recovery.PHASES; a phase absent from ``phases`` does not apply)."""
    if not bars:
        return ""
    # the labels' column fits the longest label (about 7 px a character at 12 px), within reason
    width, bar_h, gap = 900, 22, 12
    left = min(max(200, 7 * max(len(label) for label, _ in bars) + 16), 440)
    totals = [sum(v for v in phases.values() if v is not None) for _, phases in bars]
    scale_max = max([*totals, 10.0])  # a 1 s partial bar must not look like a full recovery
    height = len(bars) * (bar_h + gap) + 30
    out = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" role="img" aria-label="recovery phases">']
    for i, (label, phases) in enumerate(bars):
        y = 6 + i * (bar_h + gap)
        out.append(f'<text x="{left - 8}" y="{y + bar_h / 2 + 4}" text-anchor="end" font-size="12">'
                   f'{escape(label)}</text>')
        x = float(left)
        unobserved = None
        for name in (p for p in PHASES if p in phases):
            d = phases[name]
            if d is None:
                unobserved = name
                break
            w = d / scale_max * (width - left - 90)
            out.append(f'<rect x="{_f(x)}" y="{y}" width="{_f(max(w, 1.0))}" height="{bar_h}" '
                       f'fill="{PHASE_COLORS[name]}">{_t(f"{label}: {name} {d:.1f}s")}</rect>')
            if w > 34:
                out.append(f'<text x="{_f(x + w / 2)}" y="{y + bar_h / 2 + 4}" font-size="11" fill="#fff" '
                           f'text-anchor="middle">{d:.1f}s</text>')
            x += w
        total = f"{totals[i]:.1f}s" if unobserved is None else \
            f"{totals[i]:.1f}s, then {unobserved} not observed"
        if not any(p in phases for p in PHASES):   # trained through it: no phase applied
            total = "no recovery: the job trained through it"
        out.append(f'<text x="{_f(x + 6)}" y="{y + bar_h / 2 + 4}" font-size="12" '
                   f'fill="{"#222" if unobserved is None else "#999"}">{escape(total)}</text>')
    ly = height - 12
    lx = left
    occurred = {name for _, phases in bars for name, d in phases.items() if d}
    for name in (p for p in PHASES if p in occurred):   # the legend shows what occurs
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{PHASE_COLORS[name]}"/>'
                   f'<text class="legend-item" x="{lx + 14}" y="{ly}" font-size="11">{name}</text>')
        lx += 100
    out.append("</svg>")
    return "".join(out)
