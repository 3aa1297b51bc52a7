"""The rendezvous sweep: torch's own handlers for 8 ... 1,024 nodes, each size as bench/rdzv/plan.py says.

:func:`sweep` runs bench.rdzv.episodes for every size and backend (preset ``fast``): formation,
re-formation after losing 1 node / 1 % / 10 % (hard, leaving, torch's SIGTERM path), joins, the store's
traffic and CPU, the harness' own CPU per node. A backend's sweep stops at the first size that broke (an
episode that did not complete): a larger one would break as well. ``python -m bench --scale-rdzv`` (and
`make bench`) runs it into results.json (bench/rdzv/measure.py); ``python -m bench.rdzv.sizes`` runs chosen
sizes on another machine.
"""
from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.rdzv.episodes import elastic_range, measure_size, processes_for
from bench.rdzv.harness import ScaleJob
from bench.rdzv.pipe import HarnessError
from bench.rdzv.plan import SCOPES, plan
from bench.rdzv.records import SizeResult
from elastic_chaos.spec import JobSpec, RdzvBackend, preset

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
BACKENDS = ("c10d", "etcd-v2")
"""c10d first: the backend users run at scale, measured first when a sweep runs out of time."""
PRESET = "fast"

Swept = dict[str, list[SizeResult]]
"""Each backend's sizes, smallest first."""


def scale_job(backend: str, n: int, lo: int | None = None, dilation: float = 1.0,
              preset_name: str = PRESET) -> ScaleJob:
    """The simulated job the sweep (and bench.rdzv.probe) runs at ``n`` nodes: job range N-10 %:N unless ``lo``."""
    rdzv = preset(preset_name).apply(JobSpec()).rdzv
    lo_, hi = elastic_range(n) if lo is None else (lo, n)
    return ScaleJob(RdzvBackend(backend), n, lo_, hi, rdzv=rdzv, processes=processes_for(n), dilation=dilation)


def resumable(swept: Mapping[str, Sequence[SizeResult]], sizes: list[int]) -> Swept:
    """The sizes of an earlier sweep a resumed one keeps: those of ``sizes`` that ran (a not-run size is tried
    again), in order, up to and including one that broke."""
    kept: Swept = {}
    for backend, done in swept.items():
        kept[backend] = []
        for size in done:
            if size.not_run or size.nodes not in sizes:
                continue
            kept[backend].append(size)
            if size.broke:
                break
    return kept


def sweep(sizes: list[int], backends: tuple[str, ...], runs: Path, say: Callable[[str], None], *,
          steady_s: float = 10.0, dilation: float | None = None,
          on_size: Callable[[SizeResult], None] | None = None, kept: Mapping[str, Sequence[SizeResult]] | None = None
          ) -> Swept:
    """Each backend's sizes in turn (each as plan() says), stopping at the first that broke or was not run.
    ``dilation``: every size under that one; None: dilation_for, from the size before. ``kept``: sizes an
    earlier sweep measured (resumable()): not measured again, and the size before the first new one. Blocks
    for the whole sweep (hours at 1,024 nodes); ``on_size`` hears each size as it ends."""
    out: Swept = {}
    for backend in backends:
        out[backend] = list((kept or {}).get(backend) or [])
        if out[backend] and out[backend][-1].broke:
            say(f"  {backend}: kept from the earlier sweep, which broke at {out[backend][-1].nodes} nodes")
            continue
        after = max((s.nodes for s in out[backend]), default=0)
        for n in (n for n in sizes if n > after):
            size = _one(backend, n, out[backend][-1] if out[backend] else None, runs, say, steady_s, dilation)
            out[backend].append(size)
            if on_size is not None:
                on_size(size)
            if size.broke:
                say(f"  {backend} broke at {n} nodes: {size.broke}; larger sizes not tried")
            if size.not_run is not None or size.broke:
                break
    return out


def _one(backend: str, n: int, previous: SizeResult | None, runs: Path, say: Callable[[str], None],
         steady_s: float, dilation: float | None) -> SizeResult:
    """One size of the sweep: measured as planned, or why it was not run."""
    step = plan(n, previous, dilation)
    if step.not_run is not None:
        say(f"  {backend} stops before {n} nodes: {step.not_run}")
        return SizeResult.skipped(backend, n, step.dilation, step.not_run, step.scope)
    modes, losses, real_s = SCOPES[step.scope]
    say(f"rendezvous at scale: {backend}, {n} nodes, time dilation {step.dilation:g}, {step.scope} "
        f"(load {os.getloadavg()[0]:.2f})")
    try:
        size = measure_size(scale_job(backend, n, dilation=step.dilation), runs / f"rdzv-{backend}-{n}", say,
                            steady_s=steady_s, modes=modes, losses=losses, episode_real_s=real_s)
    except HarnessError as exc:
        size = SizeResult.failed(backend, n, str(exc))
    return size.updated(scope=step.scope, episode_real_s=real_s, date=datetime.date.today().isoformat())


@dataclass(frozen=True)
class Where:
    """What the figures were measured on: kept with them (the shipped figures say it)."""

    date: str
    machine: str
    cores: int
    torch: str


def where() -> Where:
    """This machine, today, and the torch it runs (imported here: the lab runs torch's own code)."""
    import torch

    return Where(datetime.date.today().isoformat(), platform.node(), os.cpu_count() or 1,
                 torch.__version__.split("+")[0])
