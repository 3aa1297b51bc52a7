"""The audit's answer for replayed traces: what this trace costs this job, at this checkpoint interval.

Runs that replayed a trace (report.json's ``replay`` block) are grouped by the
trace (its file's digest, or the generator's parameters), the compression and
the job's checkpoint interval; each group shows its runs' goodput over the
replay (nearest-rank p50, min, max: elastic_chaos.analysis.stats), the
preemptions injected and skipped, and the lost steps and regain per
preemption. Two groups that differ only in the checkpoint interval answer
"what would a shorter interval buy us under this trace".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.replay import REPLAY, ReplaySummary
from elastic_chaos.analysis.stats import Stat
from elastic_chaos.reporting.load import load_run


@dataclass
class ReplayGroup:
    trace: str
    compress: float | None
    checkpoint_every: int | None
    folders: list[Path] = field(default_factory=list)
    goodputs: list[float] = field(default_factory=list)
    injected: int = 0
    skipped: int = 0
    lost_steps: list[float] = field(default_factory=list)
    regains: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "compress": self.compress, "checkpoint_every": self.checkpoint_every,
                "runs": len(self.folders), "goodput": Stat.of(self.goodputs).to_json(),
                "injected": self.injected, "skipped": self.skipped,
                "lost_steps": Stat.of(self.lost_steps).to_json(), "regain_s": Stat.of(self.regains).to_json(),
                "run_folders": [str(f) for f in self.folders]}


def trace_name(trace: dict[str, Any]) -> str:
    """A trace's identity: its file and digest, or the generator and its parameters."""
    if trace.get("sha256"):
        return f"{Path(str(trace.get('file', ''))).name}@{trace['sha256']}"
    return " ".join(f"{k}={v}" for k, v in trace.items())


def groups(folders: Sequence[Path]) -> list[ReplayGroup]:
    """The replay groups of the runs in ``folders`` (runs without a replay are left out)."""
    out: dict[tuple[Any, ...], ReplayGroup] = {}
    for folder in folders:
        run = load_run(folder)
        replay: ReplaySummary | None = run.result.measured.get(REPLAY.name)
        if replay is None:
            continue
        key = (trace_name(dict(replay.trace or {})), replay.compress, replay.checkpoint_every)
        g = out.setdefault(key, ReplayGroup(*key))
        g.folders.append(folder)
        if replay.goodput is not None:
            g.goodputs.append(replay.goodput)
        g.injected += replay.injected or 0
        g.skipped += replay.skipped or 0
        for f in run.faults:
            rec = f.recovery
            if rec.lost_steps is not None:
                g.lost_steps.append(float(rec.lost_steps))
            if rec.regain_s is not None:
                g.regains.append(float(rec.regain_s))
    return sorted(out.values(), key=lambda g: (g.trace, g.compress or 0, g.checkpoint_every or 0))


def render_text(found: Sequence[ReplayGroup]) -> str:
    """The replay groups as a table for the terminal."""
    lines = ["", "Replayed traces: what each costs the job, per checkpoint interval (goodput over the replay)"]
    head = ["trace", "compress", "ckpt every", "runs", "goodput p50", "min", "max", "injected", "skipped",
            "lost steps p50", "regain p50"]
    rows = [head]
    for g in found:
        gp, lost, regain = Stat.of(g.goodputs), Stat.of(g.lost_steps), Stat.of(g.regains)
        rows.append([g.trace, f"{g.compress:g}" if g.compress else "-", str(g.checkpoint_every or "-"),
                     str(len(g.folders)), _f(gp.p50), _f(gp.min), _f(gp.max),
                     str(g.injected), str(g.skipped), _f(lost.p50, "{:g}"), _f(regain.p50, "{:.1f}s")])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)
