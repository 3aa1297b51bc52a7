"""The bench's rendezvous-at-scale step: the check against real torchrun, then the sweep, into results.json.

`make bench` and ``python -m bench --scale-rdzv`` call :func:`measure`: it replays the scale bench's real
jobs in the harness (bench/rdzv/validate.py), then sweeps the sizes (bench/rdzv/sweep.py) -- every size
handed to ``save`` as it ends (``--scale-rdzv`` writes OUT/results.json then: a sweep stopped midway, hours
in, keeps what it measured and says so) -- continuing an earlier sweep with ``--rdzv-resume`` and keeping
the sizes of the backends it does not sweep. The section it leaves is bench/rdzv/section.py's.
"""
from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.local_nodes import NodesRun
from bench.rdzv.records import SizeResult
from bench.rdzv.section import KEY, RdzvSection
from bench.rdzv.sweep import BACKENDS, SIZES, Swept, resumable, sweep, where
from bench.rdzv.validate import validate


def sizes_arg(given: str | None, default: str) -> list[int]:
    """``--sizes``-style node counts; '' means none."""
    return [int(s) for s in (default if given is None else given).split(",") if s.strip()]


def measure(args: argparse.Namespace, runs: Path, results: dict[str, Any], say: Callable[[str], None],
            save: Callable[[dict[str, Any]], None] | None = None) -> None:
    """The harness over --rdzv-sizes, checked against the scale bench's real jobs (``results``: the section is
    replaced in it; ``save``: called with ``results`` as each size ends). Blocks for the whole sweep."""
    began = time.monotonic()
    sizes = sizes_arg(args.rdzv_sizes, ",".join(map(str, SIZES)))
    section = RdzvSection.of(results)
    real = section.real if args.scale_rdzv else tuple(NodesRun.from_json(r) for r in results.get("scale") or ())
    section = section.updated(validation=tuple(validate(real or (), runs, say)),
                              validated=datetime.date.today().isoformat())
    results[KEY] = section.to_json()
    if not sizes:
        say("rendezvous at scale: no sizes (--rdzv-sizes ''): only the check against real torchrun, the sweep kept")
        return
    say(f"rendezvous at scale: {sizes} on {', '.join(args.rdzv_backends)}")
    command = "python -m bench --scale-rdzv" if args.scale_rdzv else "make bench"
    # hand-written notes on how an earlier sweep was put together: not this one's
    section, kept, command = _resumed(section.updated(notes=None), args, sizes, command)
    section, others, command = _not_swept(section, args.rdzv_backends, command)
    done: Swept = {b: list(s) for b, s in {**kept, **others}.items()}

    def keep(size: SizeResult) -> None:
        """Each size into OUT/results.json as it ends: a sweep stopped midway (hours at 1,024 nodes) keeps what it
        measured, said so in the section, and `python -m bench --render` writes it up."""
        done.setdefault(size.backend, []).append(size)
        results[KEY] = _stamped(section, command, done, began).updated(
            interrupted=f"the sweep did not finish: it had measured up to {size.backend} {size.nodes} nodes when it "
                        "stopped; the sizes after it have no figures").to_json()
        if save is not None:
            save(results)

    swept = sweep(sizes, args.rdzv_backends, runs, say, on_size=keep, kept=kept)
    final = {b: swept.get(b) or others[b] for b in BACKENDS if b in swept or b in others}
    results[KEY] = _stamped(section, command, final, began).updated(interrupted=None).to_json()


def _stamped(section: RdzvSection, command: str, sizes: Mapping[str, Sequence[SizeResult]],
             began: float) -> RdzvSection:
    """The section with these sizes, where and when they were measured, by which command."""
    here = where()
    return section.updated(date=here.date, machine=here.machine, cores=here.cores, torch=here.torch,
                           command=command, sizes={b: tuple(s) for b, s in sizes.items()},
                           wall_s=round(time.monotonic() - began))


def _resumed(section: RdzvSection, args: argparse.Namespace, sizes: list[int],
             command: str) -> tuple[RdzvSection, Swept, str]:
    """With --rdzv-resume: the earlier sweep's sizes this one keeps (each with its date), said in the section."""
    if not args.rdzv_resume:
        return section.updated(resumed=None), {}, command
    kept = resumable({b: v for b, v in section.sizes.items() if b in args.rdzv_backends}, sizes)
    kept = {b: [s.dated(section.date) for s in done] for b, done in kept.items()}  # sizes before they had a date
    which = "; ".join(f"{b} {', '.join(str(s.nodes) for s in done)}" for b, done in kept.items() if done)
    resumed = (f"this sweep continued the one of {section.date} (`{section.command}`), whose sizes it kept: "
               f"{which or 'none'} nodes")
    return section.updated(resumed=resumed), kept, command + " --rdzv-resume"


def _not_swept(section: RdzvSection, backends: tuple[str, ...], command: str) -> tuple[RdzvSection, Swept, str]:
    """The backends not swept this time: their sizes kept as they were (each with its date), said in the section."""
    others = {b: [s.dated(section.date) for s in v] for b, v in section.sizes.items() if b not in backends}
    if not others:
        return section.updated(not_swept=None), others, command
    not_swept = "; ".join(f"{b}, whose sizes were kept as measured ({', '.join(sorted({str(s.date) for s in v}))})"
                          for b, v in others.items())
    return section.updated(not_swept=not_swept), others, command + f" --rdzv-backends {','.join(backends)}"


def backends_arg(given: str) -> tuple[str, ...] | None:
    """``--rdzv-backends``: the backends, in order; None when one is not a backend or there is none."""
    backends = tuple(b.strip() for b in given.split(",") if b.strip())
    return backends if backends and all(b in BACKENDS for b in backends) else None
