"""``elastic-chaos timeouts [job options]``: every timeout a job's failure meets, in order.

Lays out the collective timeout, NCCL's dump wait and heartbeat, the rendezvous'
keep-alive expiry and last call, the agent's shutdown wait, the pod grace period
and the spot notice for the job the options describe (the same options as
``run``: ``--rdzv-preset``, ``--pg-timeout``, ``--backend``, ``--nccl-...``), then
checks their order. Then the same timeouts as a degraded link meets them (the
keep-alive, the store's, the collective's, NCCL's; elastic_chaos.analysis.link_order):
each pair misordered so that a slow link is taken for a dead node is named, and
with a link fault's options (``--delay-ms``, ``--rate``, ``--down``, ``--to-store``)
whether that degradation stays inside every timeout it meets. Exit 0 when every
ordering can work (warnings included), 1 naming each that cannot (or a degradation
that outlasts a timeout), 2 for a usage error. Starts nothing.
"""
from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = __doc__ + """
examples:
  elastic-chaos timeouts --rdzv-preset fast --backend nccl
  elastic-chaos timeouts --backend gloo --pg-timeout 1800          # exits 1: a partition stalls 30 min
  elastic-chaos timeouts --backend nccl --nccl-dump-wait-ms 180000  # exits 1: no time to checkpoint
  elastic-chaos timeouts --own-script --backend gloo                # a script: torch's 30 min default
  elastic-chaos timeouts --rdzv-preset fast --down 12               # exits 1: a 12 s flap outlasts 10 s
  elastic-chaos timeouts --rdzv-preset fast --rate 0.05 --to-store  # exits 1: 5 % loss to the store
"""


def register(sub: Any) -> None:
    from elastic_chaos.analysis.link_order import Degradation
    from elastic_chaos.analysis.timeouts import Surroundings
    from elastic_chaos.options import add_arguments
    from elastic_chaos.spec import PRESETS, JobSpec, RendezvousSpec

    p = sub.add_parser("timeouts", help="lay out the timeouts a job's failure meets and check their order",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    job = p.add_argument_group("job (as for `run`)")
    add_arguments(job, JobSpec, skip=("workdir",))
    add_arguments(job, RendezvousSpec)
    job.add_argument("--rdzv-preset", choices=sorted(PRESETS), default=argparse.SUPPRESS,
                     help="recovery timing preset (docs/PRESETS.md); explicit knobs override it")
    job.add_argument("--own-script", action="store_true",
                     help="the job runs your own script: its collective timeout is torch's default "
                          "(30 min on gloo, 10 min on NCCL) unless --pg-timeout says otherwise")
    add_arguments(p.add_argument_group("around the job"), Surroundings)
    add_arguments(p.add_argument_group("a degraded link (the link faults' options)"), Degradation)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.analysis.link_order import Degradation
    from elastic_chaos.analysis.timeouts import Level, Origin, Surroundings, check, hierarchy
    from elastic_chaos.options import given
    from elastic_chaos.spec import PRESET_OPTION, JobSpec, RendezvousSpec, job_from_options

    values: dict[str, Any] = {**given(args, JobSpec), **given(args, RendezvousSpec)}
    preset = getattr(args, PRESET_OPTION, None)
    if preset is not None:
        values[PRESET_OPTION] = preset
    job = job_from_options(values)
    degraded = Degradation(**given(args, Degradation))
    backend, resolved = _backend(job)
    origin = Origin(frozenset(values), preset, args.own_script)
    around = Surroundings(**given(args, Surroundings))
    rows = hierarchy(job, backend, around, origin)
    print(f"What a failure of this job meets, in order (process group {backend.value}{resolved}, rendezvous "
          f"{job.rdzv.backend.value}, preset {preset or 'none'}):\n")
    width = max(len(t.name) for t in rows)
    for i, t in enumerate(rows, 1):
        print(f"  {i}. {t.name.ljust(width)}  {_seconds(t.seconds):>8}  {t.setting}")
        print(f"     {' ' * width}            {t.meets}")
    findings = check(job, backend, around, origin)
    print("\nchecks:")
    for f in findings:
        print(f"  {f.level.value:<5} {f.text}")
    link = _link(job, backend, origin, degraded)
    failed = [f for f in (*findings, *link) if f.level is Level.FAIL]
    if failed:
        print(f"\n{len(failed)} ordering(s) cannot work (see FAIL above).")
    return 1 if failed else 0


def _link(job: Any, backend: Any, origin: Any, degraded: Any) -> list[Any]:
    """The ordering a degraded link meets, and its verdict (with the given degradation)."""
    from elastic_chaos.analysis.link_order import describe, job_timeouts, ordering

    t = job_timeouts(job, backend, origin)
    print("\nWhat a degraded link meets, shortest first:\n  "
          + " <= ".join(f"{name} {_seconds(s)}" for name, s in ordering(t)))
    findings = describe(t, degraded)
    print("\na degraded link, never a dead node:")
    for f in findings:
        print(f"  {f.level.value:<5} {f.text}")
    return findings


def _backend(job: Any) -> tuple[Any, str]:
    """The job's process-group backend; the reference trainer's ``auto`` is NCCL when this
    machine has a GPU, else gloo."""
    from elastic_chaos.platforms.local.gpus import detect
    from elastic_chaos.spec import PgBackend

    if job.backend is not None:
        return job.backend, ""
    inventory = detect()
    if inventory.gpus:
        return PgBackend.NCCL, f" (auto: {len(inventory.gpus)} GPU(s) here)"
    return PgBackend.GLOO, f" (auto: {inventory.why_none or 'no GPU here'}; --backend nccl for a GPU cluster)"


def _seconds(v: float) -> str:
    return f"{v / 60:g} min" if v >= 600 and v % 60 == 0 else f"{v:g} s"
