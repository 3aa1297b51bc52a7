"""``elastic-chaos scale --nodes N``: what a job of N nodes should expect from its rendezvous.

Reads the figures ``python -m bench --scale-rdzv`` measured with torch's own rendezvous handlers
(elastic_chaos/scale/measured.json, shipped with the toolkit) and prints, for the job the options describe
(``--rdzv-backend``, ``--rdzv-preset``, the rendezvous knobs): formation, re-formation after one node
is lost or leaves, a node joining, the timeouts that bound them, and the store's load in steady
state -- each saying whether it was measured at that size, interpolated, or extrapolated beyond the
largest size measured. For c10d the store model (elastic_chaos/scale/store_model.py: derived from torch's
protocol and measured store costs, labelled as a model, never as a measurement) answers instead of an
extrapolation where it covers the quantity -- formation and the store's collision-free steady load beyond
the largest size measured, each printed once (elastic_chaos/scale/modelled.py) -- and its other readings
follow the measured figures. Starts nothing. Exit 0, or 2 for a usage error (with what to do).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DESCRIPTION = __doc__ + """
examples:
  elastic-chaos scale --nodes 512 --rdzv-backend c10d --rdzv-preset fast
  elastic-chaos scale --nodes 4096 --rdzv-backend etcd-v2             # torch's default timeouts
  elastic-chaos scale --nodes 256 --rdzv-preset fast --last-call-timeout 5
  elastic-chaos scale --nodes 1024 --rdzv-backend c10d --instance-type p5.48xlarge   # what one interruption costs
"""


def register(sub: Any) -> None:
    from elastic_chaos.options import add_arguments
    from elastic_chaos.scale.expect import Question
    from elastic_chaos.spec import PRESETS, RendezvousSpec

    p = sub.add_parser("scale", help="what a job of N nodes should expect from its rendezvous (measured figures)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, Question)
    from elastic_chaos.analysis.cost import CostBasis
    add_arguments(p.add_argument_group("what one interruption costs at N nodes"), CostBasis, skip=("mtbf_hours",))
    rdzv = p.add_argument_group("rendezvous (as for `run`)")
    add_arguments(rdzv, RendezvousSpec)
    rdzv.add_argument("--rdzv-preset", choices=sorted(PRESETS), default=argparse.SUPPRESS,
                      help="recovery timing preset (docs/PRESETS.md); explicit knobs override it")
    p.set_defaults(func=main, parser=p)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.options import given
    from elastic_chaos.scale import expect as ex
    from elastic_chaos.scale.figures import load
    from elastic_chaos.spec import PRESET_OPTION, RendezvousSpec, job_from_options

    question = ex.Question(**given(args, ex.Question))
    nodes = question.nodes
    if nodes is None:
        args.parser.error("give the job's size: --nodes N (e.g. --nodes 512)")
        return 2
    values: dict[str, Any] = dict(given(args, RendezvousSpec))
    preset = getattr(args, PRESET_OPTION, None)
    if preset is not None:
        values[PRESET_OPTION] = preset
    rdzv = job_from_options(values).rdzv
    figs = load(Path(question.figures).expanduser() if question.figures else None)
    backend = rdzv.backend.value
    lines = ex.expect(figs, backend, nodes, rdzv)
    k = ex.knobs(rdzv)
    print(f"A {nodes}-node job, rendezvous {backend}, preset {preset or 'none'}: keep-alive "
          f"{k['keep_alive_interval']} s x {k['keep_alive_max_attempt']} (a lost node is dead after "
          f"{k['keep_alive_interval'] * k['keep_alive_max_attempt']} s), last call {k['last_call_timeout']} s, "
          f"join timeout {k['join_timeout']} s")
    b = figs.backend(backend)
    sizes = sorted(p.nodes for p in b.points)
    print(f"Figures: torch {figs.torch}'s own rendezvous handlers, {sizes[0]}-{sizes[-1]} nodes hosted on one "
          f"machine ({figs.machine}, {figs.cores} cores), preset {figs.preset}, {figs.date} (`{figs.command}`)\n")
    traffic, work = ex.traffic(figs, backend, nodes), ex.store_work(figs, backend, nodes)
    store = _store(nodes, k, Path(question.store_costs).expanduser() if question.store_costs else None) \
        if backend == "c10d" else None
    model_line = ""
    if store is not None:   # one home per quantity: the model's where the harness did not measure (modelled.py)
        from elastic_chaos.scale import modelled
        m = store[1]
        lines[0] = modelled.formation(lines[0], b, m, figs.preset)
        traffic, model_line = modelled.steady(figs, backend, traffic, m,
                                              k["keep_alive_interval"] == figs.rdzv["keep_alive_interval"])
    width = max(len(label) for label in [*(line.what for line in lines), *(t[0] for t in [*traffic, *work])])
    for line in lines:
        print(f"  {line.what.ljust(width)}  {_s(line.seconds):>9}  {line.how}")
    form = lines[0].seconds
    if form is not None:
        share = form / k["join_timeout"]
        verdict = ("FAILS: formation takes longer than the join timeout" if share >= 1 else
                   f"formation uses {share:.0%} of it")
        print(f"  {'join timeout'.ljust(width)}  {_s(float(k['join_timeout'])):>9}  {verdict}")
    print("\nThe store in steady state (every agent syncs the state once a second and heartbeats):")
    for label, value, how in traffic:
        print(f"  {label.ljust(width)}  {_num(value):>9}  {how}")
    if model_line:
        print(f"  {'store load, collision-free (MODEL)'.ljust(width)}  {model_line}")
    print("\nWhat the store does for one formation and one re-formation (every node's compare-and-sets of the "
          "whole state: its busy time bounds any cluster's):")
    for label, value, how in work:
        print(f"  {label.ljust(width)}  {_num(value):>9}  {how}")
    if b.broke_at is not None:
        relation = "at or below" if b.broke_at <= nodes else "above"
        print(f"\nThe harness broke at {b.broke_at} nodes ({relation} this size) with preset {figs.preset}: "
              f"{b.broke_why}")
    if store is not None:
        point = next((p for p in b.points if p.nodes == nodes and p.get("formation_s") is not None), None)
        _store_model(nodes, k, width, store[0], point, formation_above=lines[0].how.startswith("MODEL"))
        _settings(nodes, k, width, store[0], b, figs.preset)
    _costs(args, nodes, lines[1:3], width)
    return 0


def _store(nodes: int, knobs: dict[str, int], path: Path | None) -> tuple[Any, Any] | None:
    """The store costs and the model's load at this size and these settings, computed once (None, said, when the
    shipped costs cannot be read; the user's own file that cannot be read is a usage error, as for --figures)."""
    from elastic_chaos.errors import SpecError
    from elastic_chaos.scale import store_costs
    from elastic_chaos.scale.store_model import load

    try:
        costs = store_costs.load(path)
    except SpecError as exc:
        if path is not None:
            raise
        print(f"\n(The c10d store model is not available: {exc})\n")
        return None
    return costs, load(nodes, costs, _protocol(knobs))


def _protocol(knobs: dict[str, int]) -> Any:
    from elastic_chaos.scale.store_model import Protocol
    return Protocol(float(knobs["keep_alive_interval"]), int(knobs["keep_alive_max_attempt"]))


def _store_model(nodes: int, knobs: dict[str, int], width: int, costs: Any, measured: Any,
                 formation_above: bool) -> None:
    """The c10d store model's reading at this size and these settings (elastic_chaos/scale/store_model.py) that the
    lines above do not already carry, labelled as a model: derived, never measured; where the harness measured
    formation at this size, the model hosted as it was and its error against that figure (one line)."""
    from elastic_chaos.scale import store_costs
    from elastic_chaos.scale.store_model import Protocol, describe, error, load

    protocol = _protocol(knobs)
    print(f"\nMODEL, not a measurement: the c10d store's load derived from torch's protocol (one key holding the "
          f"whole state, a compare-and-set of it per heartbeat, retried at once when lost) with store and client "
          f"costs measured on {costs.machine}, {costs.date} (`{store_costs.COMMAND}`); each node on one core of that "
          "machine, the network's round trip left out (it only lengthens w):")
    for what, reading in describe(nodes, costs, protocol, formation=not formation_above):
        print(f"  {what.ljust(width)}  {reading}")
    if measured is not None:   # the harness' clients ran `dilation` times faster than one core: the model hosted so
        hosted = load(nodes, costs, Protocol(protocol.keep_alive_interval_s, protocol.keep_alive_max_attempt,
                                             client_speedup=measured.dilation))
        got = measured.get("formation_s")
        model = (f"{hosted.formation_s:.1f} s, {error(hosted.formation_s, got):+.0%} against the harness' (above)"
                 if hosted.formation_s is not None else f"none ({hosted.why()}), where the harness formed (above)")
        print(f"  {'formation, the model hosted as the harness'.ljust(width)}  {model} (x{measured.dilation:g} "
              "dilation: its clients up to that much faster than one core)")


def _settings(nodes: int, knobs: dict[str, int], width: int, costs: Any, b: Any, preset: str) -> None:
    """The keep-alive settings the store model allows at this size (elastic_chaos/scale/suggest.py), as flags, with
    what they cost; labelled as derived, with the largest size the harness formed."""
    from elastic_chaos.analysis.limits import shrink_limit
    from elastic_chaos.scale.suggest import HEADROOM, MAX_STORE_SHARE, NoSetting, suggest

    formed = [p.nodes for p in b.points if p.get("formation_s") is not None]
    measured = f"the harness formed up to {max(formed)} nodes" if formed else "the harness formed no size"
    if b.broke_at is not None:
        measured += f" and broke at {b.broke_at}, with preset {preset}"
    got = suggest(nodes, costs)
    print(f"\nSettings to use at {nodes} nodes (MODEL, derived, not measured: {measured}; the shortest keep-alive "
          f"whose expiry holds {nodes} writes in turn {HEADROOM:g} x over with the store under {MAX_STORE_SHARE:g} "
          "of its core, collision-free):")
    if isinstance(got, NoSetting):
        print(f"  {'keep-alive'.ljust(width)}  none: {got.reason}")
        return
    m = got.load
    print(f"  {'flags'.ljust(width)}  {got.flags} ({_job_holds(nodes, knobs, costs)})")
    print(f"  {'torchrun'.ljust(width)}  --rdzv-conf {got.rdzv_conf}")
    print(f"  {'N writes in turn'.ljust(width)}  {m.serial_s:.1f} s against the {m.expiry_s:g} s expiry "
          f"({m.expiry_s / m.serial_s:.1f} x)")
    print(f"  {'store in steady state'.ljust(width)}  {m.store_cores:.2f} of its core, collision-free")
    limit = shrink_limit(detect_s=0.0, floor_s=0.0, keep_alive_interval=got.keep_alive_interval_s,
                         keep_alive_max_attempt=got.keep_alive_max_attempt, last_call_s=knobs["last_call_timeout"],
                         left=False)
    lo, hi = limit.expiry_s
    print(f"  {'a node lost hard is dropped'.ljust(width)}  {lo:g}-{hi:g} s after the loss (its heartbeat expires, "
          "counted from the last one it wrote: 0 to 2 intervals before)")
    if m.formation_s is not None:
        r_lo, r_hi = (x + m.formation_s for x in limit.rendezvous_s)
        print(f"  {'re-formation after a hard loss'.ljust(width)}  about {r_lo:.0f}-{r_hi:.0f} s: that + the job's "
              f"last call {knobs['last_call_timeout']} s + a poll + the model's formation {m.formation_s:.1f} s")
        if m.formation_s >= knobs["join_timeout"]:
            print(f"  {'join timeout'.ljust(width)}  raise it above {m.formation_s:.0f} s (--join-timeout): the "
                  f"job's {knobs['join_timeout']} s is shorter than the model's formation")
    print(f"  {'should a round collapse anyway'.ljust(width)}  it keeps about {got.collapse_keeps:.0f} participants")


def _job_holds(nodes: int, knobs: dict[str, int], costs: Any) -> str:
    """Whether the job's own keep-alive meets the same two conditions as the setting suggested, and if not, which."""
    from elastic_chaos.scale.store_model import load
    from elastic_chaos.scale.suggest import shortfall

    settings = f"this job's {knobs['keep_alive_interval']} s x {knobs['keep_alive_max_attempt']}"
    why = shortfall(load(nodes, costs, _protocol(knobs)))
    return f"{settings} holds as well" if why is None else f"{settings} does not hold: {why}"


def _costs(args: argparse.Namespace, nodes: int, lines: list[Any], width: int) -> None:
    """What one interruption's re-formation costs on the job's GPUs, when they were given (analysis/cost.py)."""
    from elastic_chaos.analysis.cost import CostBasis, idle_cost
    from elastic_chaos.options import given
    basis = CostBasis(**given(args, CostBasis)).recorded()
    if basis.gpus_per_node is None:
        return
    gpus = nodes * basis.gpus_per_node
    print(f"\nWhat one interruption costs on the job's {gpus} GPUs ({nodes} nodes x {basis.gpus_per_node}), "
          "the re-formation alone (the workers' restart and re-training add to it; `elastic-chaos run` measures "
          "all of it), as sure as the figure it comes from (above):")
    for line in lines:
        if line.seconds is None:
            print(f"  {line.what.ljust(width)}  {'-':>9}  not known: its re-formation was not measured")
            continue
        gpu_hours, usd = idle_cost(line.seconds, gpus, basis.gpu_hour_price)
        money = f", ${usd:,.2f}" if usd is not None else " (no price given)"
        print(f"  {line.what.ljust(width)}  {gpu_hours:>9,.2f}  GPU-hours{money}")
    if basis.price_source is not None:
        print(f"  price per GPU-hour: ${basis.gpu_hour_price:g}, {basis.price_source}")


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.3g}"
