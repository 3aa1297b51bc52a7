"""timeline.png with matplotlib: the optional extra (``pip install elastic-chaos[png]``).

The same picture as the report's inline SVG, for places that show images but
not HTML (a chat message, a slide). matplotlib is imported here only, and a
missing matplotlib is a note in the report, not an error.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.events import CheckpointEv
from elastic_chaos.reporting.views.series import Series
from elastic_chaos.reporting.views.svg import FAULT_COLOR, PHASE_COLORS, node_color

MISSING_NOTE = ("timeline.png skipped: matplotlib is not installed "
                "(pip install 'elastic-chaos[png]' or `make install`)")


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_png(path: Path, series: Series, faults: Sequence[FaultResult], t0: float, t1: float,
              title: str) -> None:
    """Draw the timeline to ``path``. Raises ImportError when matplotlib is absent."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    fig, (ax, ax_ws) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True,
                                    gridspec_kw={"height_ratios": [4, 1]})
    try:
        nodes = series.nodes
        labelled: set[str] = set()
        for s in series.steps:
            label = s.node if s.node not in labelled else None
            labelled.add(s.node)
            width = max(1.2, 3.5 - 1.2 * (nodes.index(s.node) if s.node in nodes else 0))  # lockstep ranks
            ax.plot([p[0] - t0 for p in s.points], [p[1] for p in s.points], lw=width,
                    color=node_color(nodes, s.node), label=label)
        for t, step, name in series.checkpoints:
            ax.plot([t - t0], [step], "o", ms=4, color="#2ca02c" if name == CheckpointEv.LOADED.name else "#555")
        top = max(series.max_step, 1)
        for f in faults:
            ax.axvline(f.injected_at - t0, color=FAULT_COLOR, ls="--", lw=1.5)
            ax.text(f.injected_at - t0, top * 1.02, f" {f.fault} → {f.target}", color=FAULT_COLOR,
                    fontsize=8, va="bottom")
            start = f.measured_from - t0   # the phases count from there (a notice acted on: before it)
            for name, d in f.phases.items():
                if d is None:
                    break
                ax.axvspan(start, start + d, ymin=0, ymax=0.05, color=PHASE_COLORS[name],
                           label=name if name not in labelled else None)
                labelled.add(name)
                start += d
        for r in series.rounds:
            ax.plot([r.t - t0], [top * 0.09], marker="D", color="#6c5ce7", ms=6)
            ax.text(r.t - t0, top * 0.12, f"r{r.round}: {len(r.nodes)}" if r.round is not None
                    else f"{len(r.nodes)} node(s)", fontsize=7, ha="center")
        ax.set_ylabel("training step")
        ax.set_ylim(0, top * 1.12)
        ax.set_title(title, fontsize=10)
        if labelled:
            ax.legend(loc="upper left", fontsize=7, ncol=4)
        if series.world_size:
            ax_ws.step([t - t0 for t, _ in series.world_size], [w for _, w in series.world_size],
                       where="post", color="#333")
        for a, b in series.pauses:   # between two worlds, not a world of 0
            ax_ws.axvspan(a - t0, b - t0, color="#eeeeee", zorder=3)
            ax_ws.text((a + b) / 2 - t0, 0.5, "no training", fontsize=7, ha="center", color="#666", zorder=4,
                       transform=ax_ws.get_xaxis_transform())
        ax_ws.set_ylabel("world size")
        ax_ws.set_xlabel("seconds since the run started")
        ax_ws.set_xlim(0, max(t1 - t0, 1.0))
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
