"""RESULTS.md's "The c10d store's load, modelled" section: the store model against the harness, and its predictions.

Renders results.json's ``store_model`` section as bench/store_model.derive left it; nothing is computed here.
"""
from __future__ import annotations

from typing import Any

from bench.render import Plots
from bench.store_model import KEY


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.0%}"


def _kb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e3:.1f}"


def _n(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def _costs(section: dict[str, Any], d: dict[str, Any]) -> list[str]:
    c, raw = d["costs"], section["raw"]
    load = ", ".join(f"{v:.2f}" for v in raw.get("load_avg") or ())
    lines = ["### The costs, measured", "",
             f"On {section['machine']}, {section['date']} (`{section['command']}`; load average before and after: "
             f"{load}; CPU clocks, so the load beside it changes them little; median of "
             f"{len(next(iter(raw['store'].values()))['get'])} repetitions, a size whose median fell below the "
             "smaller size's raised to it). State: torch's `_RendezvousState` with N participants, pickled and "
             "base64-encoded as `C10dRendezvousBackend` sends it. Store: torch's TCPStore hosted as the harness "
             "hosts it, its threads' CPU per operation from one client. Client: one retry of a lost compare-and-set "
             "(decode, unpickle, torch's `_sanitize`, pickle, encode) on one core.", "",
             "| N | state KB (base64) | store CPU per get µs | per compare_set µs | client per attempt ms |",
             "|---|---|---|---|---|"]
    for i, n in enumerate(c["nodes"]):
        lines.append(f"| {n} | {_kb(c['state_b64'][i])} | {c['get_s'][i] * 1e6:.0f} | {c['cas_s'][i] * 1e6:.0f} | "
                     f"{c['client_s'][i] * 1e3:.2f} |")
    quota = raw.get("store_quota") or {}
    if quota:
        parts = [f"x{d}: " + ", ".join(f"{n} nodes {v['cas_won'] * 1e6:.0f} µs" for n, v in sizes.items())
                 for d, sizes in quota.items()]
        lines += ["", "The same compare_set with the store held to the harness' quota (1/d of one core, 1 ms in "
                  "every d ms; bench/rdzv/throttle.py): " + "; ".join(parts) + "."]
    return lines + [""]


def _rows(d: dict[str, Any]) -> list[str]:
    lines = [f"### Model against the harness (c10d, preset {d['preset']})", "",
             "Each harness size against the model hosted as the harness hosted it: clients `dilation` times faster "
             "(time dilation), the store one core at the costs above, loopback. `ops` and `bytes` are the "
             "collision-free steady load (N reads and N/K compare-and-sets per second): the difference is the "
             "lost races (`lost` is their measured share of compare-and-sets), which the model does not predict. "
             "`CPU on measured ops`: the measured operations at the measured costs per operation. `N·w`: N writes "
             "in turn, against the heartbeat expiry K x A. `*`: this machine limited the harness' figure.", "",
             "| N | dilation | state KB model | measured | err | ops/s model | measured | err | lost | store CPU model "
             "| CPU on measured ops | measured | err | formation s model | measured | err | N·w s | K x A s |",
             "|---|" + "---|" * 17]
    for r in d["rows"]:
        star = "*" if r["limited"] else ""
        lines.append(
            f"| {r['nodes']} | x{r['dilation']:g} | {_kb(r['state_model'])} | {_kb(r['state_measured'])} | "
            f"{_pct(r['state_error'])} | {r['ops_model']:.0f} | {r['ops_measured']:.0f}{star} | {_pct(r['ops_error'])} "
            f"| {r['lost_share']:.0%} | {r['cpu_model']:.3f} | {r['cpu_on_measured_ops']:.3f} | "
            f"{r['cpu_measured']:.3f}{star} | {_pct(r['cpu_on_measured_ops_error'])} | {_n(r['formation_model'])} | "
            f"{_n(r['formation_measured'])} | {_pct(r['formation_error'])} | {r['serial_s']:.2f} | {r['expiry_s']:g} |")
    return lines + [""]


def _predictions(d: dict[str, Any]) -> list[str]:
    lines = ["### Predicted for real nodes", "",
             "Each node's agent on one core of this machine (no dilation), the store on one core, the network's "
             "round trip left out (a real one only lengthens w and moves the break lower). `rules out`: a bound "
             "says no order of requests keeps every heartbeat younger than K x A. `after a collapse`: the "
             "participants a round keeps once every node retries (it forms only with its min_nodes, here N-10 %). "
             "A model, not a measurement.", "",
             "| preset | N | state KB | store ops/s | store MB/s | store cores (collision-free) | w ms | N·w s | "
             "K x A s | verdict | formation s | after a collapse |", "|---|" + "---|" * 11]
    for p in d["predictions"]:
        verdict = f"rules out: {p['why']}" if p["breaks"] else "not ruled out by the bounds"
        if p["extrapolated"]:
            verdict += " (costs extrapolated past the sizes measured)"
        lines.append(f"| {p['preset']} | {p['nodes']} | {_kb(p['state_b64'])} | {p['ops']:.0f} | "
                     f"{p['bytes'] / 1e6:.0f} | {p['store_cores']:.2f} | {p['turnaround_s'] * 1e3:.2f} | "
                     f"{p['serial_s']:.1f} | {p['expiry_s']:g} | {verdict} | {_n(p['formation_s'])} | "
                     f"{p['stall']:.0f} of {p['min_nodes']} needed |")
    bps = "; ".join(f"{name}: " + ", ".join(f"{where} {n if n is not None else 'none'}" for where, n in by.items())
                    for name, by in d["break_points"].items())
    return lines + ["", f"The smallest N a bound rules out: {bps}.", ""]


def _settings(d: dict[str, Any]) -> list[str]:
    rows = d.get("settings") or []
    if not rows:
        return []
    lines = ["### Settings the model allows at N", "",
             "The shortest keep-alive interval (torch's 3 attempts kept) whose expiry holds N writes in turn twice "
             "over with the collision-free steady state under half the store's core "
             "(elastic_chaos/scale/suggest.py; `elastic-chaos scale --nodes N --rdzv-backend c10d` prints it). "
             "Derived, not run: the harness formed none of these sizes here. A node lost hard is dropped when "
             "its heartbeat expires, K x (A - 2) to K x A after the loss (elastic_chaos/analysis/limits.py); "
             "re-formation adds the last call, a poll and the formation.", "",
             "| N | flags | a lost node dropped after, s | N·w s | store cores | formation s | after a collapse |",
             "|---|" + "---|" * 6]
    for r in rows:
        if "none" in r:
            lines.append(f"| {r['nodes']} | none: {r['none']} | | | | | |")
            continue
        dropped = f"{r['dropped_s'][0]:g}-{r['dropped_s'][1]:g}"
        lines.append(f"| {r['nodes']} | `{r['flags']}` | {dropped} | {r['serial_s']:.1f} | {r['store_cores']:.2f} | "
                     f"{_n(r['formation_s'])} | {r['collapse_keeps']:.0f} |")
    return lines + [""]


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    """The section (nothing before `python -m bench --store-model` has run, or without a c10d sweep)."""
    section = results.get(KEY) or {}
    d = section.get("derived")
    if not d:
        return []
    lines = ["## The c10d store's load, modelled", "",
             "elastic_chaos/scale/store_model.py derives the c10d rendezvous store's load from torch 2.13's "
             "protocol (dynamic_rendezvous.py, c10d_rendezvous_backend.py): the whole state, every participant and "
             "its heartbeat, pickled under one key; per node a read at most once a second (the monitor loop's "
             "`num_nodes_waiting`, the state holder's 1 s cache) and a compare-and-set of the whole state every "
             "keep-alive interval K, which sends the state read and the new one and receives the store's; a lost "
             "compare-and-set retried at once. From three costs measured below it gives the collision-free load and "
             "two bounds: the store's core, and the serialization of one key (a write wins only if nobody won "
             "since its state was read, so N heartbeats take at least N turnarounds w, and every node's must land "
             "within K x A).", ""]
    lines += _costs(section, d) + _rows(d) + _predictions(d) + _settings(d)
    lines += ["### Findings", ""] + [f"- {f}" for f in d.get("findings") or ()] + [""]
    return lines
