"""One size of the rendezvous-at-scale harness, once, with what the sweep holds fixed: the preset, how the nodes
arrive, the dilation. The sweep (bench/rdzv/sweep.py) answers "how does it grow" with preset ``fast`` and every
node arriving at once; a probe answers one question beside it ("does 1,024 form with torch's defaults?"), and
its command is what a document quotes. Formation and a steady window only; nothing is written to
bench/RESULTS.md or elastic_chaos/scale/measured.json.

    python -m bench.rdzv.probe --nodes 1024 --rdzv-preset default --dilation 64
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.rdzv.episodes import measure_size, timeout_s
from bench.rdzv.pipe import HarnessError
from bench.rdzv.records import SizeResult
from bench.rdzv.sweep import scale_job
from elastic_chaos.errors import SpecError
from elastic_chaos.spec import PRESETS, RdzvBackend


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.rdzv.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, required=True, help="nodes in the job (its world size)")
    p.add_argument("--backend", default="c10d", choices=[b.value for b in RdzvBackend],
                   help="rendezvous backend (default c10d)")
    p.add_argument("--rdzv-preset", default="fast", choices=sorted(PRESETS), help="rendezvous preset (default fast)")
    p.add_argument("--dilation", type=float, default=1.0,
                   help="time dilation (bench/rdzv/clock.py): 1 = real time; the store gets 1/D of one core")
    p.add_argument("--spread", type=float, default=0.0, metavar="SECONDS",
                   help="the nodes arrive evenly over this many perceived seconds (default 0: all at once)")
    p.add_argument("--real-minutes", type=float, default=40.0,
                   help="real minutes the formation may take before it counts as not completed (default 40)")
    p.add_argument("--steady", type=float, default=10.0, metavar="SECONDS",
                   help="the steady window after formation, perceived seconds (0: none)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the run's logs and probe.json (default: a new folder under the temp dir)")
    args = p.parse_args(argv)
    if args.nodes < 2:
        p.error(f"--nodes {args.nodes}: a rendezvous needs 2 nodes or more")
    if not args.dilation >= 1.0:
        p.error(f"--dilation {args.dilation:g}: 1 (real time) or more")
    if not 0.0 <= args.spread <= 3600.0:
        p.error(f"--spread {args.spread:g}: 0 to 3600 perceived seconds")
    if not 0.0 < args.real_minutes <= 24 * 60:
        p.error(f"--real-minutes {args.real_minutes:g}: more than 0, at most a day")
    if args.steady < 0:
        p.error(f"--steady {args.steady:g}: 0 or more")
    return args


@dataclass(frozen=True)
class Probed:
    """A probe's size and how it was run: probe.json, beside its logs."""

    size: SizeResult
    preset: str
    spread_s: float
    command: str
    logs: str

    def to_json(self) -> dict[str, Any]:
        return {**self.size.to_json(), "preset": self.preset, "spread_s": self.spread_s, "command": self.command,
                "logs": self.logs}


def probe(args: argparse.Namespace, say: Callable[[str], None]) -> Probed:
    """Formation and a steady window of one size (blocks until it formed or its real minutes ran out)."""
    job = scale_job(args.backend, args.nodes, dilation=args.dilation, preset_name=args.rdzv_preset)
    n, lo, hi = args.nodes, job.min_nodes, job.max_nodes
    offsets = [args.spread * i / (n - 1) for i in range(n)] if args.spread else None
    real_s = args.real_minutes * 60
    out = args.out or Path(tempfile.mkdtemp(prefix=f"elastic-chaos-probe-{args.backend}-{n}-{args.rdzv_preset}-"))
    say(f"probe: {n} {args.backend} nodes ({lo}:{hi}), preset {args.rdzv_preset}, arrivals over {args.spread:g} s, "
        f"dilation x{args.dilation:g}; the formation may take {timeout_s(n, args.dilation, real_s):.3g} perceived "
        f"seconds ({args.real_minutes:g} real minutes) after the last arrival; logs in {out}")
    size = measure_size(job, out, say, steady_s=args.steady, modes=(), losses=(), offsets=offsets,
                        episode_real_s=real_s).updated(date=datetime.date.today().isoformat())
    probed = Probed(size, args.rdzv_preset, args.spread, "python -m bench.rdzv.probe " + " ".join(sys.argv[1:]),
                    str(out))
    (out / "probe.json").write_text(json.dumps(probed.to_json(), indent=1) + "\n")
    return probed


def summary(size: SizeResult, logs: str | None) -> list[str]:
    """The probe's answer in a few lines."""
    form = size.episode("formation")
    lines = []
    if size.broke or form is None or form.seconds is None:
        lines.append(f"formation DID NOT COMPLETE: {size.broke}")
    else:
        lines.append(f"formation {form.seconds:.2f} s (perceived), {form.rounds} round(s)")
    if form is not None:
        lines.append(f"  store: {form.store_ops:,} operations, {form.store_bytes / 1e6:,.0f} MB, "
                     f"{form.store_cpu_s:.2f} CPU s, waited for its core {form.store_throttled_s:.0f} real s; "
                     f"this machine busy {form.busy:.0%}, saturated {form.saturated_s:.0f} s; "
                     f"live nodes declared dead {form.declared_dead}")
    lines.append(f"  the run's logs and probe.json: {logs}")
    steady = size.steady
    if steady:
        each = ", ".join(f"{k} {v:g}" for k, v in sorted(steady.ops_per_s.items()))
        lines.append(f"steady state: {steady.ops:,.0f} store operations/s ({each}), "
                     f"{steady.bytes_per_s / 1e6:.2f} MB/s, store {steady.store_cpu:.3f} core, "
                     f"{steady.unplanned_rounds} unplanned round(s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    def say(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    try:
        probed = probe(args, say)
    except (HarnessError, SpecError) as exc:
        print(f"rdzv probe: {exc}", file=sys.stderr)
        return 1
    for line in summary(probed.size, probed.logs):
        say(line)
    return 0 if not probed.size.broke else 3


if __name__ == "__main__":
    sys.exit(main())
