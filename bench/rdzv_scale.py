"""Rendezvous at scale: torch's own handlers for 8 ... 1,024+ nodes (chaos.scale), checked against torchrun.

``sweep`` runs chaos.scale.episodes for every size and backend (fast preset): formation,
re-formation after losing 1 node / 1 % / 10 % (hard, leaving, torch's SIGTERM path), joins, the
store's traffic and CPU, the harness' own CPU per node. A backend's sweep stops at the first size
that broke (an episode that did not complete): a larger one would break as well.

``validate`` replays each real torchrun job of the scale bench (bench/scale.py: N-1:N nodes, fast,
etcd-v2) in the harness -- the same nodes arriving at the same offsets, then one hard kill -- and
compares the rendezvous figures as torchrun's agents logged them with the harness' own.

``figures`` turns the sweep into chaos/scale/measured.json (what ``elastic-chaos scale`` reads).
"""
from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.scale.episodes import (
    EPISODE_REAL_S,
    LIMITED_SHARE,
    LOSSES,
    MODES,
    elastic_range,
    measure_size,
    processes_for,
    timeout_s,
)
from chaos.scale.figures import EPISODE_METRICS, Figures, backend_figures
from chaos.scale.harness import HarnessError, ScaleJob
from chaos.spec import JobSpec, RdzvBackend, preset

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
BACKENDS = ("c10d", "etcd-v2")
"""c10d first: the backend users run at scale, measured first when a sweep runs out of time."""
PRESET = "fast"
VALIDATION_REPEAT = 5
"""Hard kills per size in the harness' replay of a real job: their median is compared."""
TOLERANCE_S = 1.5
"""How far the harness may be from real torchrun on one measurement, and why (dynamic_rendezvous.py):
a waiting node polls the state every 1 s (``_delay(seconds=1)`` on SYNC) and a node's last heartbeat
before a kill lands 1 to 2 keep-alive intervals (1 s with fast) before it; each side of a comparison
draws both phases independently, so one measurement each can differ by up to 2 s, with a standard
deviation of about 0.6 s: 1.5 s is 2.5 of those."""


UNDILATED_UP_TO = 32
"""Sizes up to this run in real time; above, under a time dilation (chaos.scale.clock) chosen by dilation_for."""
HARNESS_SHARE = 0.25
"""The share of each host process' core the agents' CPU per real second is sized for: far below BUSY_PROCESS
(one interpreter lock) and RUN_DELAY, so that no agent waits for this machine."""
FULL_EPISODES_UP_TO = 8.0
"""Up to this dilation a size runs every episode; above, each perceived second costs that many real ones, so
only formation, the steady window and the one-node hard loss and leave (with their joins) run."""
REDUCED_MODES = ("hard", "leave")
REDUCED_LOSSES: tuple[tuple[str, float | None], ...] = (("1", None),)
FORMATION_REAL_S = 2400.0
"""Past the sizes whose losses can be judged here (MIN_PERCEIVED_TIMEOUT_S), a size runs its formation and
steady window only, and the formation may wait this many real seconds: the largest sizes are the question the
sweep is for, and one long episode costs less than the five of a reduced size."""

SCOPES: dict[str, tuple[tuple[str, ...], tuple[tuple[str, float | None], ...], float]] = {
    "every episode": (MODES, LOSSES, EPISODE_REAL_S),
    "formation, steady, hard 1 and leave 1": (REDUCED_MODES, REDUCED_LOSSES, EPISODE_REAL_S),
    "formation and steady only": ((), (), FORMATION_REAL_S),
}
"""What a size runs, by how much dilation it needs: (loss modes, loss sizes, real seconds one episode may wait)."""
FULL, REDUCED, FORMATION = SCOPES


def dilation_for(n: int, previous: dict[str, Any] | None = None, *, processes: int | None = None,
                 cores: int | None = None, episodes: tuple[str, ...] | None = None) -> float:
    """The time dilation size ``n`` runs under here: 1 up to UNDILATED_UP_TO nodes; above, from what the
    ``previous`` size cost this machine, in cores per perceived second: the larger of its steady window (the
    harness' CPU per node x nodes) and its busiest episode (the machine's busy share x cores x its dilation: a
    re-formation's compare-and-set storm costs far more than the steady state, and a dilation sized on the
    steady state alone let heartbeats expire in the storm); ``episodes``: only those labels count (a size that
    runs its formation only need not be sized for the size before's storms). Each node's work grows with N (the
    state every node reads and writes holds every node), so the total grows as N^2; the dilation makes that fit
    HARNESS_SHARE of each host process' core, rounded up to a power of two. Without a previous size:
    (N / UNDILATED_UP_TO)^2."""
    if n <= UNDILATED_UP_TO:
        return 1.0
    if previous and (previous.get("steady") or previous.get("episodes")):
        m, d = int(previous["nodes"]), float(previous.get("dilation") or 1.0)
        steady = float((previous.get("steady") or {}).get("agent_cpu") or 0.0) * m
        busiest = max((float(e.get("busy") or 0.0) for e in previous.get("episodes") or []
                       if episodes is None or e.get("label") in episodes), default=0.0)
        demand = max(steady, busiest * (cores or os.cpu_count() or 1) * d) * (n / m) ** 2
        need = demand / (HARNESS_SHARE * (processes or processes_for(n)))
    else:
        need = (n / UNDILATED_UP_TO) ** 2
    return float(max(1, 2 ** math.ceil(math.log2(max(1.0, need)))))


MIN_PERCEIVED_TIMEOUT_S = 30.0
"""A size whose dilation leaves an episode less than this many perceived seconds is not run with it: a
re-formation after a hard loss needs 6-7 s with `fast` and a storm more, and a formation 1-2 s up to 256 nodes,
so a shorter timeout would call torch broken for this machine's want of time."""


@dataclass(frozen=True)
class Plan:
    """How the sweep runs one size here: under which dilation, which episodes; or why not at all."""

    dilation: float
    scope: str
    """A key of SCOPES."""
    not_run: str | None = None

    @property
    def episode_real_s(self) -> float:
        return SCOPES[self.scope][2]


def plan(n: int, previous: dict[str, Any] | None, fixed: float | None = None) -> Plan:
    """Every episode up to FULL_EPISODES_UP_TO; the reduced set while an episode keeps MIN_PERCEIVED_TIMEOUT_S
    perceived seconds; then formation and steady only, sized on the size before's formation and steady state
    and given FORMATION_REAL_S, and so every size after it (its storms were not measured, so a dilation for
    losses could not be sized); past that, not run (``fixed``: that dilation, whatever the size before)."""
    d = fixed if fixed is not None else dilation_for(n, previous)
    # a size before that ran its formation only says nothing of what a loss's storm costs: no losses after it
    storms_known = fixed is not None or not previous or previous.get("scope") != FORMATION
    if storms_known and timeout_s(n, d) >= MIN_PERCEIVED_TIMEOUT_S:
        return Plan(d, FULL if d <= FULL_EPISODES_UP_TO else REDUCED)
    f = fixed if fixed is not None else dilation_for(n, previous, episodes=("formation",))
    if timeout_s(n, f, FORMATION_REAL_S) >= MIN_PERCEIVED_TIMEOUT_S:
        return Plan(f, FORMATION)
    return Plan(f, FORMATION, not_run=(
        f"not run: the dilation it needs here (x{f:g}, from the size before's CPU) leaves its formation "
        f"{timeout_s(n, f, FORMATION_REAL_S):.3g} perceived seconds within {FORMATION_REAL_S / 60:g} real minutes, "
        f"under the {MIN_PERCEIVED_TIMEOUT_S:g} s it is judged in; measuring it needs a machine with more cores "
        "(fewer agents per core, a smaller dilation) or a longer bench"))


def scale_job(backend: str, n: int, lo: int | None = None, dilation: float = 1.0,
              preset_name: str = PRESET) -> ScaleJob:
    """The simulated job the sweep (and bench.rdzv_probe) runs at ``n`` nodes: job range N-10 %:N unless ``lo``."""
    rdzv = preset(preset_name).apply(JobSpec()).rdzv
    lo_, hi = elastic_range(n) if lo is None else (lo, n)
    return ScaleJob(RdzvBackend(backend), n, lo_, hi, rdzv=rdzv, processes=processes_for(n), dilation=dilation)


def resumable(swept: dict[str, list[dict[str, Any]]], sizes: list[int]) -> dict[str, list[dict[str, Any]]]:
    """The sizes of an earlier sweep a resumed one keeps: those of ``sizes`` that ran (a not-run size is tried
    again), in order, up to and including one that broke."""
    kept: dict[str, list[dict[str, Any]]] = {}
    for backend, done in swept.items():
        kept[backend] = []
        for size in done:
            if size.get("not_run") or int(size["nodes"]) not in sizes:
                continue
            kept[backend].append(size)
            if size.get("broke"):
                break
    return kept


def sweep(sizes: list[int], backends: tuple[str, ...], runs: Path, say: Callable[[str], None], *,
          steady_s: float = 10.0, dilation: float | None = None,
          on_size: Callable[[dict[str, Any]], None] | None = None,
          kept: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each backend's sizes in turn (each as plan() says), stopping at the first that broke or was not run.
    ``dilation``: every size under that one; None: dilation_for, from the size before. ``kept``: sizes an
    earlier sweep measured (resumable()): not measured again, and the size before the first new one."""
    out: dict[str, list[dict[str, Any]]] = {}
    for backend in backends:
        out[backend] = list((kept or {}).get(backend) or [])
        if out[backend] and out[backend][-1].get("broke"):
            say(f"  {backend}: kept from the earlier sweep, which broke at {out[backend][-1]['nodes']} nodes")
            continue
        after = max((int(s["nodes"]) for s in out[backend]), default=0)
        for n in (n for n in sizes if n > after):
            step = plan(n, out[backend][-1] if out[backend] else None, dilation)
            if step.not_run is not None:
                say(f"  {backend} stops before {n} nodes: {step.not_run}")
                out[backend].append({"backend": backend, "nodes": n, "dilation": step.dilation, "episodes": [],
                                     "steady": None, "broke": None, "not_run": step.not_run, "scope": step.scope})
                if on_size is not None:
                    on_size(out[backend][-1])
                break
            modes, losses, real_s = SCOPES[step.scope]
            say(f"rendezvous at scale: {backend}, {n} nodes, time dilation {step.dilation:g}, {step.scope} "
                f"(load {os.getloadavg()[0]:.2f})")
            try:
                size = measure_size(scale_job(backend, n, dilation=step.dilation), runs / f"rdzv-{backend}-{n}", say,
                                    steady_s=steady_s, modes=modes, losses=losses, episode_real_s=real_s).to_json()
            except HarnessError as exc:
                size = {"backend": backend, "nodes": n, "episodes": [], "steady": None,
                        "broke": f"the harness itself failed: {exc}"}
            size.update({"scope": step.scope, "episode_real_s": real_s, "date": datetime.date.today().isoformat()})
            out[backend].append(size)
            if on_size is not None:
                on_size(size)
            if size.get("broke"):
                say(f"  {backend} broke at {n} nodes: {size['broke']}; larger sizes not tried")
                break
    return out


def validate(real: list[dict[str, Any]], runs: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """One row per real scale-bench size that logged its rendezvous: real vs harness, formation (from the
    last node's start) and re-formation after one hard kill."""
    rows = []
    for r in real:
        rdzv = r.get("rdzv") or {}
        n = int(r["nodes"])
        if not r.get("ok") or rdzv.get("formation_s") is None or n < 2:
            continue
        say(f"validation: harness replay of the real {n}-node job")
        try:
            result = measure_size(scale_job("etcd-v2", n, lo=n - 1), runs / f"rdzv-validate-{n}", say, steady_s=0,
                                  modes=("hard",), losses=(("1", None),), offsets=rdzv.get("offsets_s"),
                                  restarts=rdzv.get("restarts_s"), repeat=VALIDATION_REPEAT).to_json()
        except HarnessError as exc:
            rows.append({"nodes": n, "error": str(exc)})
            continue
        row: dict[str, Any] = {"nodes": n, "load_avg_real": r.get("load_avg_1m"), "load_before": result["load_before"],
                               "restarts_replayed": rdzv.get("restarts_s") is not None}
        for metric, label, real_key in (("formation_s", "formation", "formation_s"),
                                        ("reformation_s", "hard 1", "reformation_s")):
            harness = _median([e["seconds"] for e in result["episodes"] if e["label"] == label])
            real_s = rdzv.get(real_key)
            row[metric] = {"real": real_s, "harness": harness,
                           "diff": None if harness is None or real_s is None else round(harness - real_s, 3)}
        row["within"] = all(v["diff"] is not None and abs(v["diff"]) <= TOLERANCE_S
                            for k, v in row.items() if isinstance(v, dict))
        rows.append(row)
    return rows


def where() -> dict[str, Any]:
    """What the figures were measured on: kept with them (``figures`` reads it back)."""
    import torch

    return {"date": datetime.date.today().isoformat(), "machine": platform.node(), "cores": os.cpu_count() or 1,
            "torch": torch.__version__.split("+")[0]}


def _median(values: list[Any]) -> float | None:
    known = sorted(v for v in values if v is not None)
    return round(statistics.median(known), 3) if known else None


def figures(swept: dict[str, list[dict[str, Any]]], on: dict[str, Any]) -> Figures:
    """The shipped figures from the sweep's sizes (``on``: where(), as recorded when they were measured)."""
    knobs, here = preset(PRESET), where()
    return Figures(str(on.get("date", here["date"])), str(on.get("machine", here["machine"])),
                   int(on.get("cores", here["cores"])), str(on.get("torch", here["torch"])), PRESET,
                   {"keep_alive_interval": int(knobs.keep_alive_interval or 5),
                    "keep_alive_max_attempt": int(knobs.keep_alive_max_attempt or 3),
                    "last_call_timeout": int(knobs.last_call_timeout or 30), "join_timeout": 600},
                   {b: backend_figures(b, run) for b, sizes in swept.items()
                    if (run := [s for s in sizes if not s.get("not_run")])})


# -- the report ----------------------------------------------------------------------
PLOTTED = (("formation_s", "formation"), ("reform_hard_s", "1 lost (hard)"),
           ("reform_leave_s", "1 left (leave)"), ("join_s", "1 joins"))


def plot(figs: Figures, path: Path) -> bool:
    """Seconds per episode and store bytes/s over N, per backend, fitted models dashed; hollow markers
    where this machine was the limit."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not figs.backends:
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


def _series(ax: Any, b: Any, metric: str, label: str, color: str, marker: str) -> None:
    pts = [(p.nodes, p.get(metric), metric in p.limited) for p in b.points if p.get(metric) is not None]
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


def markdown(results: dict[str, Any], plot_name: str | None) -> list[str]:
    section = results.get("rdzv_scale")
    if not section or "figures" not in section:
        return []
    figs = Figures.from_json(section["figures"])
    lines = ["## Rendezvous at scale", "",
             f"torch {figs.torch}'s own rendezvous handlers and agent loop (`DynamicRendezvousHandler` over etcd-v2 "
             f"and over c10d's TCPStore, `SimpleElasticAgent.run` with its monitor loop and keep-alive timer) for "
             f"N nodes without workers, as threads of a few processes on this machine ({figs.cores} cores): "
             "chaos/scale. Preset "
             f"{figs.preset}; job range N-10 %:N; measured {section.get('date')} by `{section.get('command')}` "
             f"({section.get('wall_s')} s). Seconds from the event to the last node's rendezvous complete in "
             f"the new world. `*`: this machine was saturated (its cores, or one harness process' interpreter lock) "
             f"for more than {LIMITED_SHARE:.0%} of the episode, so the figure is an upper bound set by the "
             "machine, not by torch. Sizes above "
             f"{UNDILATED_UP_TO} run under a time dilation (the `dilation` column; chaos/scale/clock.py, after "
             "DieCast): every clock torch's agents read runs that many times slower, so each agent gets that "
             "many times the CPU per second it perceives, while the store is held to that fraction of one core "
             "(a single-core store host, chaos/scale/throttle.py); their seconds, rates and CPU per second are "
             "perceived.", ""]
    lines += [f"- {note}" for note in section.get("notes", [])] + ([""] if section.get("notes") else [])
    if section.get("interrupted"):
        lines += [f"**Not a whole sweep**: {section['interrupted']}.", ""]
    if section.get("resumed"):
        lines += [f"**Resumed**: {section['resumed']}.", ""]
    if section.get("not_swept"):
        lines += [f"**Not swept this time**: {section['not_swept']}.", ""]
    for backend, sizes in section["sizes"].items():
        lines += size_table(backend, sizes)
    lines += _fits_table(figs)
    if plot_name:
        lines += [f"![rendezvous at scale]({plot_name})", ""]
    lines += _validation_table(section.get("validation") or [], int(section.get("cores") or 1),
                               unfinished_real(section))
    lines += _recorded_table(recorded(results))
    lines += ["### Findings", ""] + [f"- {f}" for f in section.get("findings", [])] + [""]
    return lines


def _cell(ep: dict[str, Any] | None) -> str:
    if ep is None:
        return "-"
    if ep.get("seconds") is None:
        return "FAILED"
    return f"{ep['seconds']:.1f}{'*' if ep.get('limited') else ''}"


def size_table(backend: str, sizes: list[dict[str, Any]]) -> list[str]:
    labels = list(EPISODE_METRICS.values())
    lines = [f"### {backend}", "",
             "| N | dilation | " + " | ".join(labels) + " | store ops/s | store MB/s | store CPU | harness CPU/node | "
             "load | result |", "|---|" + "---|" * (len(labels) + 7)]
    for s in sizes:
        eps = {e["label"]: e for e in s.get("episodes", [])}
        st = s.get("steady") or {}
        mark = "*" if st.get("limited") else ""
        ops = f"{sum(st['ops_per_s'].values()):.0f}{mark}" if st else "-"
        mb = f"{st['bytes_per_s'] / 1e6:.2f}{mark}" if st else "-"
        cpu = f"{st['store_cpu']:.2f}{mark}" if st else "-"
        per = f"{1000 * st['agent_cpu']:.1f} m{mark}" if st else "-"
        lines.append(f"| {s['nodes']} | {_dilation(s)} | " + " | ".join(_cell(eps.get(label)) for label in labels)
                     + f" | {ops} | {mb} | {cpu} | {per} | {s.get('load_before', '-')} | "
                     f"{_result(s)} |")
    lines += ["", "Columns are episodes (`hard`: heartbeats stop; `leave`: SIGTERM with trainer.rdzv_leave; "
                  "`sigterm`: torch's own SIGTERM path; `join after X`: as many new nodes as X lost). Steady state "
                  "over the window after formation: store operations (state reads and compare-and-sets, store "
                  "get/set of the rank assignment) and payload bytes per second summed over nodes, the store's "
                  "CPU in cores, the harness' CPU per node in millicores.", ""]
    return lines


def _result(size: dict[str, Any]) -> str:
    if size.get("not_run"):
        return str(size["not_run"])
    scope = f" ({size['scope']})" if size.get("scope") and size["scope"] != FULL else ""
    return ("ok" if not size.get("broke") else "broke: " + _clipped(str(size["broke"]))) + scope


RESULT_CELL_CHARS = 160


def _clipped(why: str) -> str:
    """A break reason short enough for a table cell, cut between words and saying where the rest is."""
    if len(why) <= RESULT_CELL_CHARS:
        return why
    cut = why[:RESULT_CELL_CHARS].rsplit(" ", 1)[0].rstrip(";,:")
    return f"{cut} ... (whole in the findings)"


def _dilation(size: dict[str, Any]) -> str:
    """``1``, or ``x16`` with the store's quota; ``x16 (store unthrottled)`` when none could be set."""
    d = float(size.get("dilation") or 1.0)
    if d == 1.0:
        return "1"
    if size.get("not_run"):
        return f"x{d:g} needed"
    share = size.get("store_share")
    return f"x{d:g}" + (f", store {share:.3g} core" if share else " (store unthrottled)")


def _fits_table(figs: Figures) -> list[str]:
    lines = ["### Fitted models", "",
             "Least squares over the sizes this machine did not limit (every size when fewer than 2 were not "
             "limited, and the row says so: an upper bound); counts and rates over every size (the row says how "
             "many this machine limited); the model with the smallest leave-one-out error among "
             "a+bN, a+bN+cN·log2N, a+bN+cN², a+bN²+cN³, the three-term ones only with five sizes or more "
             "(chaos/scale/model.py).", "",
             "| backend | figure | model | rms | max error | leave-one-out rms | fitted on N | points |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, b in sorted(figs.backends.items()):
        for metric, f in b.fits.items():
            loo = "-" if f.loo_rms is None else f"{f.loo_rms:.3g}"
            lines.append(f"| {backend} | {metric} | {f.formula()} | {f.rms:.3g} | {f.max_error:.3g} | {loo} | "
                         f"{int(f.n_min)}-{int(f.n_max)} | {f.note} |")
    return lines + [""]


def unfinished_real(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The scale bench's real jobs behind this check that never trained at full size: nothing to compare."""
    return [r for r in section.get("real") or [] if not r.get("ok")]


def _validation_table(rows: list[dict[str, Any]], cores: int,
                      unfinished: list[dict[str, Any]] | None = None) -> list[str]:
    unfinished = unfinished or []
    if not rows and not unfinished:
        return ["### Against real torchrun", "", "Not measured in this run (it needs the scale bench's real jobs).", ""]
    lines = ["### Against real torchrun", "",
             "The scale bench's real jobs (N-1:N nodes, etcd-v2, fast) replayed in the harness: the same "
             f"nodes arriving at the offsets torchrun's agents logged, then {VALIDATION_REPEAT} hard kills (their "
             "median; one kill in the real job), each survivor's workers failing when the real survivor's agent "
             "started its next rendezvous (`replayed`; otherwise at the kill). Formation: the last "
             "node's start -> every node's rendezvous complete in the world of N; re-formation: the kill -> every "
             f"survivor's rendezvous complete. Tolerance {TOLERANCE_S} s per measurement ({_tolerance_why()}). "
             f"`*` on the load: the real job ran above {REAL_LOAD_PER_CORE:g} runnable processes per core, so its "
             "figures are this machine's (its agents and etcd waited for a CPU behind the workers); such a row is "
             "shown, not judged.", "",
             "| N | formation real | harness | diff | re-formation real | harness | diff | within | restarts | "
             "load (real run) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['nodes']} | harness failed: {r['error'][:120]} |" + " |" * 8)
            continue
        f, g = r["formation_s"], r["reformation_s"]
        limited = real_limited(r, cores)
        verdict = "not judged" if limited else "yes" if r["within"] else "NO"
        lines.append(f"| {r['nodes']} | {f['real']} | {f['harness']} | {f['diff']} | {g['real']} | {g['harness']} | "
                     f"{g['diff']} | {verdict} | {'replayed' if r.get('restarts_replayed') else 'at the kill'} | "
                     f"{r.get('load_avg_real')}{'*' if limited else ''} |")
    for r in unfinished:
        lines.append(f"| {r['nodes']} | real job failed: {str(r.get('error'))[:120]} |" + " |" * 8)
    return lines + [""]


def recorded(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Re-formation after one hard kill in the scale bench's last real jobs (``results["scale"]``: detect +
    rendezvous phases, kill -> the survivors' round complete) beside the harness' on etcd-v2 at the same N:
    the validation replay's where there is one, else the sweep's ``hard 1`` (range N-10 %:N; for one lost
    node the same rendezvous as N-1:N)."""
    section = results.get("rdzv_scale") or {}
    harness: dict[int, float] = {}
    for size in (section.get("sizes") or {}).get("etcd-v2", []):
        for ep in size.get("episodes", []):
            if ep["label"] == "hard 1" and ep.get("seconds") is not None:
                harness[int(size["nodes"])] = ep["seconds"]
    for row in section.get("validation") or []:
        if "error" not in row and row["reformation_s"]["harness"] is not None:
            harness[int(row["nodes"])] = row["reformation_s"]["harness"]
    rows = []
    kill = (results.get("recovery") or {}).get("etcd-v2/fast/kill-node") or {}
    d, r = (kill.get("detect") or {}).get("median"), (kill.get("rendezvous") or {}).get("median")
    if d is not None and r is not None and 2 in harness:  # the recovery bench: the same 1:2 job, median of n
        real_s = round(d + r, 2)
        n_kills = (kill.get("recovery_s") or {}).get("n")
        rows.append({"nodes": 2, "real": real_s, "harness": harness[2], "diff": round(harness[2] - real_s, 2),
                     "load": f"recovery bench etcd-v2/fast/kill-node, median of {n_kills}"})
    for real in results.get("scale") or []:
        phases, n = real.get("phases") or {}, int(real["nodes"])
        known = phases.get("detect") is not None and phases.get("rendezvous") is not None
        if real.get("ok") and known and n in harness:
            real_s = round(phases["detect"] + phases["rendezvous"], 2)
            rows.append({"nodes": n, "real": real_s, "harness": harness[n], "diff": round(harness[n] - real_s, 2),
                         "load": real.get("load_avg_1m")})
    return rows


def _recorded_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["Re-formation after one hard kill in the scale bench's own last real jobs (the Scale table: detect + "
             "rendezvous phases) beside the harness at the same N (the replay above, else the sweep's `hard 1`):", "",
             "| N | real torchrun | harness | diff | within | load (real run) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['nodes']} | {r['real']} | {r['harness']} | {r['diff']} | "
              f"{'yes' if abs(r['diff']) <= TOLERANCE_S else 'NO'} | {r['load']} |" for r in rows]
    return lines + [""]


REAL_LOAD_PER_CORE = 3.0
"""A real job whose load average passed this many runnable processes per core measured this machine: its
agents' heartbeat threads and etcd waited for a CPU behind N workers importing torch (16 local nodes on 2
cores: formation 162 s, where the harness, without workers, forms in 1-2 s). Its row is shown, not judged."""


def real_limited(row: dict[str, Any], cores: int) -> bool:
    """Whether this machine, not torch, set the pace of the real job behind a validation row."""
    load = row.get("load_avg_real")
    return load is not None and load > REAL_LOAD_PER_CORE * max(cores, 1)


def _tolerance_why() -> str:
    return ("a waiting node polls the state every 1 s and a killed node's last heartbeat lands 1-2 keep-alive "
            "intervals before the kill: each side draws both independently")


def findings(section: dict[str, Any]) -> list[str]:
    """Plain-language findings from the figures (nothing hard-coded)."""
    figs = Figures.from_json(section["figures"])
    out = []
    for backend, b in sorted(figs.backends.items()):
        broken = broken_episode(section, backend)
        shown = [m for m in EPISODE_METRICS]
        total = sum(1 for p in b.points for m in shown if p.get(m) is not None)
        limited = sum(1 for p in b.points for m in shown if p.get(m) is not None and m in p.limited)
        stopped = next((s for s in (section.get("sizes") or {}).get(backend) or [] if s.get("not_run")), None)
        if stopped:
            out.append(f"{backend} stopped before {stopped['nodes']} nodes, which were {stopped['not_run']}")
        # a size that broke is not "measured": say the last one every episode run there completed at
        ran = max((p.nodes for p in b.points if b.broke_at is None or p.nodes < b.broke_at), default=0)
        out.append(f"{backend}: " + (f"measured up to {ran} nodes" if ran else "no size completed")
                   + f"; this machine limited {limited} of {total} "
                   "episode figures (`*`)" + (f"; broke at {b.broke_at} nodes: {b.broke_why}" if b.broke_at else "")
                   + _timeout(section, backend)
                   + _why_broke(b.broke_why or "", seen_dead=bool(broken and broken.get("declared_dead")))
                   + _machine_share(broken))
        out += _growth(backend, b)
        out += _storm(backend, b)
        out += _store_bound(backend, (section.get("sizes") or {}).get(backend) or [])
        form = b.fits.get("formation_s")
        if form is not None:
            out.append(f"{backend} formation: {form.formula()} (rms {form.rms:.2g} s)")
    out += _validation_finding(section.get("validation") or [], int(section.get("cores") or 1))
    out += [f"the real {r['nodes']}-node job never trained at full size on this machine ({r.get('error')}): "
            "no check at that size" for r in unfinished_real(section)]
    return out


def recorded_finding(results: dict[str, Any]) -> list[str]:
    rows = recorded(results)
    if not rows:
        return []
    ok = [r for r in rows if abs(r["diff"]) <= TOLERANCE_S]
    return [f"re-formation after a hard kill: the harness is within {TOLERANCE_S} s of the scale bench's last real "
            f"jobs on {len(ok)} of {len(rows)} sizes ({', '.join(_diff(r) for r in rows)})"]


def _diff(row: dict[str, Any]) -> str:
    return f"{row['nodes']} nodes: {row['diff']:+.2f} s"


def _why_broke(why: str, *, seen_dead: bool) -> str:
    """torch's code behind a failure the harness saw (matched on what the nodes reported); ``seen_dead``: the
    broken episode saw a live node declared dead (Episode.declared_dead)."""
    if "assigned_ranks" in why and not seen_dead:
        return (". Why is not established by this run: the nodes timed out waiting for their rank assignment "
                "(SimpleElasticAgent._assign_worker_ranks), but no participant of a completed round was seen "
                "declared dead")
    if "assigned_ranks" in why:
        return (". torch's cause, seen in this run: a participant whose heartbeat is older than keep_alive_interval x "
                "keep_alive_max_attempt is removed by any node's sync (_BackendRendezvousStateHolder._sanitize), "
                "even after its round completed (_remove_participant_epilogue reopens a round only when nobody is "
                "left): nodes that read the state before and after see different worlds, rank 0's multi_get of "
                "every role_info waits for a node that never writes it, and every node of the round fails after "
                "the store's 60 s timeout (DistStoreError in SimpleElasticAgent._assign_worker_ranks). Heartbeats "
                "came late because this machine could not run the re-formation's compare-and-set storm in real time")
    if "0 round(s) completed" in why:
        storm = (". torch's mechanism: every join is a compare-and-set of the whole state on one key, retried at "
                 "once when lost (_DistributedRendezvousOpExecutor.run), so N nodes joining together make O(N^2) "
                 "attempts, each moving the whole state")
        if seen_dead:
            return storm + ("; while they queued, joined nodes' heartbeats (also compare-and-sets) aged past "
                            "keep_alive_interval x keep_alive_max_attempt and _sanitize removed them again (seen "
                            "in this run), so the round never held min_nodes live participants")
        return storm + "; no live participant was seen declared dead: the storm itself did not end in time"
    return ""


def _timeout(section: dict[str, Any], backend: str) -> str:
    """The timeout a backend's broken size had, in perceived seconds, when a dilation shortened it."""
    sizes = (section.get("sizes") or {}).get(backend) or []
    if not sizes or not sizes[-1].get("broke"):
        return ""
    n, d = int(sizes[-1]["nodes"]), float(sizes[-1].get("dilation") or 1.0)
    real_s = float(sizes[-1].get("episode_real_s") or EPISODE_REAL_S)
    if timeout_s(n, d, real_s) >= timeout_s(n):
        return ""
    return (f" (its timeout: {timeout_s(n, d, real_s):g} perceived seconds, at most {real_s / 60:g} real minutes "
            f"at dilation x{d:g}, where {timeout_s(n):g} s would apply in real time)")


def broken_episode(section: dict[str, Any], backend: str) -> dict[str, Any] | None:
    """The stored episode a backend's sweep broke on (its last size's last episode), None when none broke."""
    sizes = (section.get("sizes") or {}).get(backend) or []
    if not sizes or not sizes[-1].get("broke") or not sizes[-1].get("episodes"):
        return None
    episode: dict[str, Any] = sizes[-1]["episodes"][-1]
    return episode


QUIET_S = 1.0
"""A broken episode whose machine was saturated no longer than this (two CPU samples) was not held back by it."""


def _machine_share(ep: dict[str, Any] | None) -> str:
    """How long this machine was saturated during the episode a size broke on."""
    if not ep or not ep.get("elapsed_s"):
        return ""
    saturated = float(ep.get("saturated_s") or 0.0)
    share = saturated / ep["elapsed_s"]
    if share > 0.5:
        where = ("so this machine, running every node's (de)serialisation on its cores, set that pace: on N machines "
                 "the same storm runs in parallel, and whether torch alone breaks at this size is not decided here")
    elif saturated > QUIET_S:
        # a storm saturates the machine for seconds, heartbeats expire, then the nodes wait out the store's
        # timeouts with the machine idle: a small share of a long episode, but the damage was done in the storm
        where = ("long enough to delay heartbeats past their expiry while the nodes' compare-and-sets queued on it; "
                 "the rest of the episode was spent waiting out timeouts, so whether torch alone breaks at this "
                 "size is not decided here")
    else:
        where = "so torch's own timing, not this machine, is the likelier limit"
    return (f". This machine was saturated for {ep.get('saturated_s')} s of that episode's {ep['elapsed_s']} s "
            f"({share:.0%}), {where}")


STORE_BOUND_SHARE = 0.25
"""An episode whose store waited for its one-core quota more than this share of the time was store-bound."""


def _store_bound(backend: str, sizes: list[dict[str, Any]]) -> list[str]:
    """Dilated episodes whose store, held to one core (chaos.scale.throttle), was the limit: a property of torch's
    rendezvous at that size (every operation goes through one store), not of this machine."""
    out = []
    for size in sizes:
        bound = [e for e in size.get("episodes", []) if e.get("elapsed_s")
                 and e.get("store_throttled_s", 0.0) > STORE_BOUND_SHARE * e["elapsed_s"]]
        if bound:
            worst = max(bound, key=lambda e: e["store_throttled_s"] / e["elapsed_s"])
            out.append(f"{backend} at {size['nodes']} nodes: the store, held to one core, was the limit in "
                       f"{len(bound)} episode(s) (worst: {worst['label']}, waiting for its core "
                       f"{worst['store_throttled_s'] / worst['elapsed_s']:.0%} of the time): a single-threaded store "
                       "serving every node's whole-state reads and compare-and-sets saturates at this size")
    return out


def _growth(backend: str, b: Any) -> list[str]:
    pts = [(p.nodes, p.get("store_bytes_per_s"), p.get("store_ops_per_s"), "store_bytes_per_s" in p.limited)
           for p in b.points if p.get("store_bytes_per_s")]
    if len(pts) < 2:
        return []
    (n0, b0, o0, _), (n1, b1, o1, lim) = pts[0], pts[-1]
    bytes_exp = math.log(b1 / b0) / math.log(n1 / n0)
    ops_exp = math.log(o1 / o0) / math.log(n1 / n0) if o0 and o1 else float("nan")
    caveat = " (the largest size limited by this machine)" if lim else ""
    return [f"{backend} store in steady state: operations grow as N^{ops_exp:.2f} and payload bytes as "
            f"N^{bytes_exp:.2f} ({n0} -> {n1} nodes{caveat}: {b0 / 1e6:.3g} -> {b1 / 1e6:.3g} MB/s). "
            "torch's cause: every "
            "agent's monitor loop calls num_nodes_waiting(), which reads the whole rendezvous state at most once a "
            "second (cache_duration 1 s), and every keep-alive rewrites the whole state (all participants and "
            "their heartbeats) with a compare-and-set on one key: N agents x O(N) bytes each"]


def _storm(backend: str, b: Any) -> list[str]:
    ops, mb = b.measured("reform_hard_store_ops"), dict(b.measured("reform_hard_store_mb"))
    if len(ops) < 2:
        return []
    (n0, o0), (n1, o1) = ops[0], ops[-1]
    grow = math.log(o1 / o0) / math.log(n1 / n0) if o0 and o1 else float("nan")
    bytes_grow = math.log(mb[n1] / mb[n0]) / math.log(n1 / n0) if mb.get(n0) and mb.get(n1) else float("nan")
    return [f"{backend}: one re-formation after a hard loss costs the store {o0:.0f} operations "
            f"({mb.get(n0, 0):.2g} MB) at {n0} nodes and {o1:.0f} ({mb.get(n1, 0):.4g} MB) at {n1}: operations "
            f"grow as N^{grow:.1f}, bytes as "
            f"N^{bytes_grow:.1f}. torch's cause: every survivor removes and re-adds itself with a compare-and-set of "
            "the whole state (O(N) bytes), retried at once when lost, so when all start together each success costs "
            "up to one attempt per contender: O(N^2) operations, O(N^3) bytes"]


def _validation_finding(rows: list[dict[str, Any]], cores: int) -> list[str]:
    done = [r for r in rows if "error" not in r]
    judged = [r for r in done if not real_limited(r, cores)]
    out = []
    if judged:
        ok = [r for r in judged if r["within"]]
        worst = max((abs(v["diff"]) for r in judged for v in (r["formation_s"], r["reformation_s"])
                     if v["diff"] is not None), default=None)
        out.append(f"the harness agrees with real torchrun within {TOLERANCE_S} s on {len(ok)} of {len(judged)} sizes "
                   f"({', '.join(str(r['nodes']) for r in judged)} nodes); worst difference {worst} s")
    for r in done:
        if real_limited(r, cores):
            out.append(f"the real {r['nodes']}-node job measured this machine, not torch (load average "
                       f"{r['load_avg_real']} on {cores} cores: formation {r['formation_s']['real']} s real against "
                       f"{r['formation_s']['harness']} s in the harness, which runs no workers); not judged")
    return out


def one_size_main(argv: list[str] | None = None) -> int:
    """``python -m bench.rdzv_scale --backend c10d --sizes 256,512 --json-dir DIR``: the harness at each size in
    turn, one JSON per size written as it ends (a lent machine may be taken back mid-sweep), stopping at the
    first size that broke. For a machine other than this one (bench/device_scale.sh): its figures are kept
    apart from the sweep above by ``python -m bench.device_runs`` (they were measured on other cores)."""
    import argparse
    import json
    import tempfile

    p = argparse.ArgumentParser(prog="python -m bench.rdzv_scale", description=one_size_main.__doc__)
    p.add_argument("--backend", choices=BACKENDS, default="c10d")
    p.add_argument("--sizes", required=True, help="comma-separated node counts, e.g. 256,512,1024")
    p.add_argument("--json-dir", type=Path, required=True, help="where rdzv-BACKEND-N.json go")
    p.add_argument("--steady-s", type=float, default=10.0, help="the steady-state window (default 10)")
    p.add_argument("--dilation", default="auto",
                   help=f"time dilation: a number >= 1 for every size, or auto (1 up to {UNDILATED_UP_TO} nodes, "
                        "then from the size before's harness CPU per node; see chaos.scale.clock)")
    args = p.parse_args(argv)
    try:
        fixed = None if args.dilation == "auto" else float(args.dilation)
    except ValueError:
        p.error(f"--dilation {args.dilation!r}: a number >= 1, or auto")
    if fixed is not None and not fixed >= 1:
        p.error(f"--dilation {args.dilation!r}: a number >= 1 (1 = real time), or auto")
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: give node counts separated by commas, e.g. 256,512")
    if not sizes or min(sizes) < 2:
        p.error("--sizes: at least one node count, each 2 or more")
    args.json_dir.mkdir(parents=True, exist_ok=True)

    def keep(size: dict[str, Any]) -> None:
        (args.json_dir / f"rdzv-{args.backend}-{size['nodes']}.json").write_text(
            json.dumps({**where(), "backend": args.backend, "size": size}, indent=1))
        print(f"{args.backend} {size['nodes']}: wall {size.get('wall_s')} s, broke: {size.get('broke')}", flush=True)

    with tempfile.TemporaryDirectory(prefix="rdzv-scale-") as runs:
        swept = sweep(sizes, (args.backend,), Path(runs), lambda m: print(m, flush=True), steady_s=args.steady_s,
                      dilation=fixed, on_size=keep)
    return 1 if any(s.get("broke") for s in swept[args.backend]) else 0


if __name__ == "__main__":
    raise SystemExit(one_size_main())
