"""RESULTS.md's "Rendezvous at scale" section: the sweep's tables, the fitted models, the check against torchrun.

Reads the typed section (bench/rdzv/section.py) and renders it; every figure in it was measured or derived
before (bench/rdzv/findings.py, the shipped figures): nothing is computed here. ``size_table`` also renders
another machine's sizes (bench/render/other_cores.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.local_nodes import NodesRun
from bench.rdzv.plan import FULL, UNDILATED_UP_TO
from bench.rdzv.records import LIMITED_SHARE, Episode, SizeResult
from bench.rdzv.section import RdzvSection
from bench.rdzv.validate import (
    REAL_LOAD_PER_CORE,
    TOLERANCE_S,
    VALIDATION_REPEAT,
    Recorded,
    ValidationRow,
    real_limited,
    recorded,
)
from bench.render import Plots
from elastic_chaos.scale.figures import EPISODE_METRICS, Figures


def markdown(section: RdzvSection, recorded: Sequence[Recorded], plot_name: str | None) -> list[str]:
    """The section (nothing when it holds no figures)."""
    figs = section.figures
    if figs is None:
        return []
    lines = ["## Rendezvous at scale", "",
             f"torch {figs.torch}'s own rendezvous handlers and agent loop (`DynamicRendezvousHandler` over etcd-v2 "
             f"and over c10d's TCPStore, `SimpleElasticAgent.run` with its monitor loop and keep-alive timer) for "
             f"N nodes without workers, as threads of a few processes on this machine ({figs.cores} cores): "
             "bench/rdzv. Preset "
             f"{figs.preset}; job range N-10 %:N; measured {section.date} by `{section.command}` "
             f"({section.wall_s} s). Seconds from the event to the last node's rendezvous complete in "
             f"the new world. `*`: this machine was saturated (its cores, or one harness process' interpreter lock) "
             f"for more than {LIMITED_SHARE:.0%} of the episode, so the figure is an upper bound set by the "
             "machine, not by torch. Sizes above "
             f"{UNDILATED_UP_TO} run under a time dilation (the `dilation` column; bench/rdzv/clock.py, after "
             "DieCast): every clock torch's agents read runs that many times slower, so each agent gets that "
             "many times the CPU per second it perceives, while the store is held to that fraction of one core "
             "(a single-core store host, bench/rdzv/throttle.py); their seconds, rates and CPU per second are "
             "perceived.", ""]
    lines += [f"- {note}" for note in section.notes or ()] + ([""] if section.notes else [])
    if section.interrupted:
        lines += [f"**Not a whole sweep**: {section.interrupted}.", ""]
    if section.resumed:
        lines += [f"**Resumed**: {section.resumed}.", ""]
    if section.not_swept:
        lines += [f"**Not swept this time**: {section.not_swept}.", ""]
    for backend, sizes in section.sizes.items():
        lines += size_table(backend, sizes)
    lines += _fits_table(figs)
    if plot_name:
        lines += [f"![rendezvous at scale]({plot_name})", ""]
    lines += validation_table(section.validation, section.cores or 1, section.unfinished_real)
    lines += _recorded_table(recorded)
    lines += ["### Findings", ""] + [f"- {f}" for f in section.findings] + [""]
    return lines


def _cell(ep: Episode | None) -> str:
    if ep is None:
        return "-"
    if ep.seconds is None:
        return "FAILED"
    return f"{ep.seconds:.1f}{'*' if ep.limited else ''}"


def size_table(backend: str, sizes: Sequence[SizeResult]) -> list[str]:
    labels = list(EPISODE_METRICS.values())
    lines = [f"### {backend}", "",
             "| N | dilation | " + " | ".join(labels) + " | store ops/s | store MB/s | store CPU | harness CPU/node | "
             "load | result |", "|---|" + "---|" * (len(labels) + 7)]
    for s in sizes:
        eps = {e.label: e for e in s.episodes}
        st = s.steady
        mark = "*" if st is not None and st.limited else ""
        ops = f"{st.ops:.0f}{mark}" if st else "-"
        mb = f"{st.bytes_per_s / 1e6:.2f}{mark}" if st else "-"
        cpu = f"{st.store_cpu:.2f}{mark}" if st else "-"
        per = f"{1000 * st.agent_cpu:.1f} m{mark}" if st else "-"
        load = s.load_before if s.has("load_before") else "-"
        lines.append(f"| {s.nodes} | {_dilation(s)} | " + " | ".join(_cell(eps.get(label)) for label in labels)
                     + f" | {ops} | {mb} | {cpu} | {per} | {load} | "
                     f"{_result(s)} |")
    lines += ["", "Columns are episodes (`hard`: heartbeats stop; `leave`: SIGTERM with "
                  "elastic_chaos.trainer.rdzv_leave; "
                  "`sigterm`: torch's own SIGTERM path; `join after X`: as many new nodes as X lost). Steady state "
                  "over the window after formation: store operations (state reads and compare-and-sets, store "
                  "get/set of the rank assignment) and payload bytes per second summed over nodes, the store's "
                  "CPU in cores, the harness' CPU per node in millicores.", ""]
    return lines


def _result(size: SizeResult) -> str:
    if size.not_run:
        return size.not_run
    scope = f" ({size.scope})" if size.scope and size.scope != FULL else ""
    return ("ok" if not size.broke else "broke: " + _clipped(size.broke)) + scope


RESULT_CELL_CHARS = 160


def _clipped(why: str) -> str:
    """A break reason short enough for a table cell, cut between words and saying where the rest is."""
    if len(why) <= RESULT_CELL_CHARS:
        return why
    cut = why[:RESULT_CELL_CHARS].rsplit(" ", 1)[0].rstrip(";,:")
    return f"{cut} ... (whole in the findings)"


def _dilation(size: SizeResult) -> str:
    """``1``, or ``x16`` with the store's quota; ``x16 (store unthrottled)`` when none could be set."""
    d = size.dilation or 1.0
    if d == 1.0:
        return "1"
    if size.not_run:
        return f"x{d:g} needed"
    share = size.store_share
    return f"x{d:g}" + (f", store {share:.3g} core" if share else " (store unthrottled)")


def _fits_table(figs: Figures) -> list[str]:
    lines = ["### Fitted models", "",
             "Least squares over the sizes this machine did not limit (every size when fewer than 2 were not "
             "limited, and the row says so: an upper bound); counts and rates over every size (the row says how "
             "many this machine limited); the model with the smallest leave-one-out error among "
             "a+bN, a+bN+cN·log2N, a+bN+cN², a+bN²+cN³, the three-term ones only with five sizes or more "
             "(elastic_chaos/scale/model.py).", "",
             "| backend | figure | model | rms | max error | leave-one-out rms | fitted on N | points |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, b in sorted(figs.backends.items()):
        for metric, f in b.fits.items():
            loo = "-" if f.loo_rms is None else f"{f.loo_rms:.3g}"
            lines.append(f"| {backend} | {metric} | {f.formula()} | {f.rms:.3g} | {f.max_error:.3g} | {loo} | "
                         f"{int(f.n_min)}-{int(f.n_max)} | {f.note} |")
    return lines + [""]


def _tolerance_why() -> str:
    return ("a waiting node polls the state every 1 s and a killed node's last heartbeat lands 1-2 keep-alive "
            "intervals before the kill: each side draws both independently")


def validation_table(rows: Sequence[ValidationRow], cores: int, unfinished: Sequence[NodesRun] = ()) -> list[str]:
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
        if r.error is not None:
            lines.append(f"| {r.nodes} | harness failed: {r.error[:120]} |" + " |" * 8)
            continue
        f, g = r.formation_s, r.reformation_s
        limited = real_limited(r, cores)
        verdict = "not judged" if limited else "yes" if r.within else "NO"
        lines.append(f"| {r.nodes} | {f.real} | {f.harness} | {f.diff} | {g.real} | {g.harness} | "
                     f"{g.diff} | {verdict} | {'replayed' if r.restarts_replayed else 'at the kill'} | "
                     f"{r.load_avg_real}{'*' if limited else ''} |")
    for u in unfinished:
        lines.append(f"| {u.nodes} | real job failed: {str(u.error)[:120]} |" + " |" * 8)
    return lines + [""]


def _recorded_table(rows: Sequence[Recorded]) -> list[str]:
    if not rows:
        return []
    lines = ["Re-formation after one hard kill in the scale bench's own last real jobs (the Scale table: detect + "
             "rendezvous phases) beside the harness at the same N (the replay above, else the sweep's `hard 1`):", "",
             "| N | real torchrun | harness | diff | within | load (real run) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.nodes} | {r.real} | {r.harness} | {r.diff} | "
              f"{'yes' if abs(r.diff) <= TOLERANCE_S else 'NO'} | {r.load} |" for r in rows]
    return lines + [""]


def results_markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section as RESULTS.md places it, with the recovery and scale benches' re-formations beside it."""
    section = RdzvSection.of(results)
    if section.figures is None:
        return []
    rows = recorded(section.sizes, section.validation, (results.get("recovery") or {}).get("etcd-v2/fast/kill-node"),
                    [NodesRun.from_json(r) for r in results.get("scale") or ()])
    return markdown(section, rows, plots.rdzv)
