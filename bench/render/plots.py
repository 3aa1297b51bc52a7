"""The pictures beside RESULTS.md: median phases per recovery case, and the rendezvous at scale over N.

matplotlib is optional (the `png` extra): without it no picture is drawn and RESULTS.md names none.
Each function draws what results.json holds; nothing is measured or derived here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.stats import median
from elastic_chaos.analysis.recovery import PHASES
from elastic_chaos.reporting.views.svg import PHASE_COLORS
from elastic_chaos.scale.figures import BackendFigures, Figures


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def recovery(results: dict[str, Any], path: Path) -> bool:
    """A stacked bar of the median phases per case, with the floor as a line."""
    plt = _pyplot()
    cases = list(results.get("recovery", {}).items())
    if plt is None or not cases:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(cases) + 1.5))
    for row, (_key, case) in enumerate(cases):
        left = 0.0
        for phase in PHASES:
            width = median(case.get(phase)) or 0.0
            ax.barh(row, width, left=left, color=PHASE_COLORS[phase], label=phase if row == 0 else None)
            left += width
    floor = median(results.get("floor_s"))
    if floor:
        ax.axvline(floor, color="black", linestyle="--", label=f"floor {floor:.1f}s")
    ax.set_yticks(range(len(cases)), [k for k, _ in cases])
    ax.invert_yaxis()
    ax.set_xlabel("seconds after the fault (median)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


PLOTTED = (("formation_s", "formation"), ("reform_hard_s", "1 lost (hard)"),
           ("reform_leave_s", "1 left (leave)"), ("join_s", "1 joins"))


def rdzv(figs: Figures, path: Path) -> bool:
    """Seconds per episode and store bytes/s over N, per backend, fitted models dashed; hollow markers
    where this machine was the limit."""
    plt = _pyplot()
    if plt is None or not figs.backends:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colors = dict(zip([m for m, _ in PLOTTED], ["C0", "C3", "C2", "C1"], strict=True))
    for col, (backend, b) in enumerate(sorted(figs.backends.items())):
        ax = axes[col]
        for metric, label in PLOTTED:
            _series(ax, b, metric, label, colors[metric], "o")
        ax.set(title=f"{backend}: rendezvous (preset {figs.preset})", xlabel="nodes", ylabel="seconds", xscale="log")
        _legend(ax)
    ax = axes[2]
    for i, (backend, b) in enumerate(sorted(figs.backends.items())):
        _series(ax, b, "store_bytes_per_s", f"{backend} bytes/s", f"C{i + 4}", "s")
        _series(ax, b, "store_ops_per_s", f"{backend} ops/s", f"C{i + 4}", "^")
    ax.set(title="the store in steady state", xlabel="nodes", ylabel="per second", xscale="log", yscale="log")
    _legend(ax)
    fig.suptitle(f"torch {figs.torch} dynamic rendezvous on {figs.cores} cores: filled markers measured, hollow "
                 f"where this machine was the limit; dashed: the fitted model")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _series(ax: Any, b: BackendFigures, metric: str, label: str, color: str, marker: str) -> None:
    pts = [(p.nodes, v, metric in p.limited) for p in b.points if (v := p.get(metric)) is not None]
    if not pts:
        return
    ax.plot([n for n, _, _ in pts], [v for _, v, _ in pts], color=color, linewidth=0.8, label=label)
    for n, v, limited in pts:
        ax.plot([n], [v], marker=marker, color=color, markerfacecolor="none" if limited else color)
    fit = b.fits.get(metric)
    if fit is not None:
        lo, hi = min(n for n, _, _ in pts), max(n for n, _, _ in pts) * 2
        xs = [lo * (hi / lo) ** (i / 40) for i in range(41)]
        ax.plot(xs, [max(fit(x), 1e-9) for x in xs], color=color, linestyle="--", linewidth=0.7)
