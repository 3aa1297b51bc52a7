"""`python -m bench --store-model`: the c10d store's modelled load against the harness' measured rows.

:func:`measure` runs the micro-benchmark (bench/rdzv/storebench.py: torch's state, client and TCPStore on this
machine), keeps every repetition in results.json's ``store_model`` section and ships the costs
(elastic_chaos/scale/store_costs.json). :func:`derive` -- run by bench/results_file.derive on every write, so
a new sweep is checked against the same costs -- evaluates the model (elastic_chaos/scale/store_model.py) at
each c10d size the harness measured, hosted as the harness hosts it (clients ``dilation`` times faster, the
store one core), and sets model and measurement side by side with the error per row; then the harness' break
at 1,024; then the model for real nodes at 1,024-4,096 with the measured preset and with torch's defaults.
bench/render/store_model.py renders what :func:`derive` wrote; nothing there is computed.
"""
from __future__ import annotations

import datetime
import platform
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.rdzv import storebench
from bench.rdzv.records import SizeResult
from bench.rdzv.section import RdzvSection
from elastic_chaos.analysis.limits import shrink_limit
from elastic_chaos.scale import store_costs
from elastic_chaos.scale.store_model import (
    CAS_STATES,
    Protocol,
    StoreCosts,
    break_point,
    error,
    load,
    stall_participants,
)
from elastic_chaos.scale.suggest import NoSetting, suggest
from elastic_chaos.torch_defaults import RDZV

KEY = "store_model"
COMMAND = "python -m bench --store-model"
PREDICT = (1024, 2048, 4096)
"""The sizes predicted for real nodes."""


def measure(say: Callable[[str], None]) -> dict[str, Any]:
    """Measure the costs (about a minute), ship them, and return the section for results.json."""
    raw = storebench.measure(say=say)
    section = {"date": datetime.date.today().isoformat(), "command": COMMAND,
               "machine": f"{platform.node()} ({raw['cores']} cores)", "raw": raw}
    store_costs.save(costs_of(section))
    return section


def _monotone(values: Sequence[float]) -> tuple[float, ...]:
    """A bigger state never costs less to move: a median below the previous size's (noise) is raised to it."""
    out: list[float] = []
    for v in values:
        out.append(max(v, out[-1]) if out else v)
    return tuple(out)


def costs_of(section: dict[str, Any]) -> StoreCosts:
    """The costs of a ``store_model`` section: per size, the median of the repetitions."""
    raw = section["raw"]
    sizes = sorted(int(n) for n in raw["store"])
    store = raw["store"]
    return StoreCosts(tuple(sizes), tuple(float(raw["state"][str(n)]["b64"]) for n in sizes),
                      _monotone([statistics.median(store[str(n)]["get"]) for n in sizes]),
                      _monotone([statistics.median(store[str(n)]["cas_won"] + store[str(n)]["cas_lost"])
                                 for n in sizes]),
                      _monotone([raw["client"][str(n)]["median"] for n in sizes]),
                      str(section.get("machine", "")), str(section.get("date", "")),
                      tuple(raw.get("load_avg") or ()))


def _protocol(rdzv: dict[str, int], speedup: float = 1.0) -> Protocol:
    return Protocol(float(rdzv["keep_alive_interval"]), int(rdzv["keep_alive_max_attempt"]), 0.0, speedup)


def _row(size: SizeResult, costs: StoreCosts, proto: Protocol) -> dict[str, Any] | None:
    """One harness size against the model hosted as the harness hosted it (None: no steady window)."""
    st = size.steady
    if st is None or not st.ops_per_s:
        return None
    n, ops = size.nodes, st.ops_per_s
    gets, won, lost = ops.get("state_get", 0.0), ops.get("state_set", 0.0), ops.get("state_set_lost", 0.0)
    model = load(n, costs, proto)
    states_moved = gets + CAS_STATES * (won + lost)
    on_measured_ops = gets * costs.at(costs.get_s, n) + (won + lost) * costs.at(costs.cas_s, n)
    form = size.episode("formation")
    row: dict[str, Any] = {
        "nodes": n, "dilation": size.dilation, "limited": st.limited,
        "state_model": model.state_b64, "state_measured": st.bytes_per_s / states_moved if states_moved else None,
        "ops_model": model.ops_per_s, "ops_measured": gets + won + lost, "lost_share": lost / (won + lost or 1),
        "bytes_model": model.bytes_per_s, "bytes_measured": st.bytes_per_s,
        "cpu_model": model.store_cores, "cpu_on_measured_ops": on_measured_ops, "cpu_measured": st.store_cpu,
        "formation_model": model.formation_s,
        "formation_measured": form.seconds if form is not None else None,
        "serial_s": model.serial_s, "expiry_s": model.expiry_s}
    for key in ("state", "ops", "bytes", "cpu", "formation"):
        m, x = row[f"{key}_model"], row[f"{key}_measured"]
        row[f"{key}_error"] = error(m, x) if m is not None and x else None
    row["cpu_on_measured_ops_error"] = error(on_measured_ops, st.store_cpu) if st.store_cpu else None
    return row


def _broke(size: SizeResult, costs: StoreCosts, proto: Protocol, section: dict[str, Any]) -> dict[str, Any]:
    """The harness' first broken size against the model: the bounds as hosted there, and the participants a
    collapsed round keeps (the state the store held at the episode's timeout)."""
    model = load(size.nodes, costs, proto)
    ep = next((e for e in size.episodes if e.seconds is None), None)
    stalled = ep.stalled if ep is not None else None
    quota = (section["raw"].get("store_quota") or {}).get(f"{size.dilation:g}", {})
    return {"nodes": size.nodes, "dilation": size.dilation, "why": size.broke,
            "serial_s": model.serial_s, "expiry_s": model.expiry_s, "store_cores": model.store_cores,
            "bounds_break": model.breaks,
            "stall_model": (stall := stall_participants(size.nodes, costs, proto)),
            "stall_op_s": (costs.at(costs.get_s, stall) + costs.at(costs.cas_s, stall)) / 2,
            "stall_measured": stalled.participants if stalled is not None else None,
            "store_cpu_per_op_measured": (ep.store_cpu_s / ep.store_ops) if ep is not None and ep.store_ops else None,
            "store_ops_measured": ep.store_ops if ep is not None else None,
            "store_ops_per_s_measured": (ep.store_ops / (ep.elapsed_s / size.dilation))
            if ep is not None and ep.elapsed_s else None,
            "ops_model": model.ops_per_s,
            "quota_cas_s": {n: v["cas_won"] for n, v in quota.items()},
            "plain_cas_s": {n: statistics.median(section["raw"]["store"][n]["cas_won"]) for n in quota}}


def _predictions(costs: StoreCosts, presets: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    out = []
    for name, rdzv in presets.items():
        proto = _protocol(rdzv)
        for n in PREDICT:
            m = load(n, costs, proto)
            out.append({"preset": name, "nodes": n, "state_b64": m.state_b64, "ops": m.ops_per_s,
                        "bytes": m.bytes_per_s, "store_cores": m.store_cores, "turnaround_s": m.turnaround_s,
                        "serial_s": m.serial_s, "expiry_s": m.expiry_s, "breaks": m.breaks, "why": m.why(),
                        "formation_s": m.formation_s, "stall": stall_participants(n, costs, proto),
                        "min_nodes": n - n // 10, "extrapolated": m.extrapolated})
    return out


def _settings(costs: StoreCosts) -> list[dict[str, Any]]:
    """The keep-alive settings the model allows at each predicted size (elastic_chaos/scale/suggest.py)."""
    out: list[dict[str, Any]] = []
    for n in PREDICT:
        got = suggest(n, costs)
        if isinstance(got, NoSetting):
            out.append({"nodes": n, "none": got.reason})
            continue
        m = got.load
        dropped = shrink_limit(detect_s=0.0, floor_s=0.0, keep_alive_interval=got.keep_alive_interval_s,
                               keep_alive_max_attempt=got.keep_alive_max_attempt, last_call_s=0.0, left=False)
        out.append({"nodes": n, "keep_alive_interval": got.keep_alive_interval_s,
                    "keep_alive_max_attempt": got.keep_alive_max_attempt, "flags": got.flags,
                    "dropped_s": list(dropped.expiry_s), "serial_s": m.serial_s, "expiry_s": m.expiry_s,
                    "store_cores": m.store_cores, "formation_s": m.formation_s, "collapse_keeps": got.collapse_keeps})
    return out


def derive(results: dict[str, Any]) -> None:
    """The model against the c10d sizes of results.json's rendezvous section, and the predictions, into
    ``results['store_model']['derived']`` (nothing when either section is missing)."""
    section = results.get(KEY)
    rdzv = RdzvSection.of(results)
    if not section or rdzv.figures is None or "c10d" not in rdzv.sizes:
        return
    costs = costs_of(section)
    preset = rdzv.figures.rdzv
    sizes = rdzv.sizes["c10d"]
    rows = [r for s in sizes if s.broke is None and (r := _row(s, costs, _protocol(preset, s.dilation)))]
    broken = next((s for s in sizes if s.broke is not None and s.nodes), None)
    presets = {rdzv.figures.preset: preset, "torch defaults": {k: RDZV[k] for k in preset}}
    section["derived"] = {
        "preset": rdzv.figures.preset, "rdzv": preset, "rows": rows,
        "broke": _broke(broken, costs, _protocol(preset, broken.dilation), section) if broken else None,
        "predictions": _predictions(costs, presets),
        "settings": _settings(costs),
        "break_points": {name: {"real nodes": break_point(costs, _protocol(r)),
                                **{f"harness x{d:g}": break_point(costs, _protocol(r, d)) for d in (8.0, 64.0)}}
                         for name, r in presets.items()},
        "findings": [],
        "costs": {"nodes": list(costs.nodes), "state_b64": list(costs.state_b64), "get_s": list(costs.get_s),
                  "cas_s": list(costs.cas_s), "client_s": list(costs.client_s)}}
    section["derived"]["findings"] = findings(section["derived"])


def findings(d: dict[str, Any]) -> list[str]:
    """What the derived figures say, in sentences written from them: the rows' agreement, the harness' break
    against the model, and the verdict for real nodes."""
    out = []
    rows = d["rows"]
    if rows:
        state = [abs(r["state_error"]) for r in rows if r["state_error"] is not None]
        out.append(f"State size: the model's S(N) is within {max(state):.0%} of the bytes per state the harness "
                   f"moved at every size ({rows[0]['nodes']}-{rows[-1]['nodes']} nodes): about "
                   f"{(rows[-1]['state_model'] - rows[0]['state_model']) / (rows[-1]['nodes'] - rows[0]['nodes']):.0f} "
                   "bytes per participant on the wire (its address, pid, local id, rank and heartbeat, base64).")
        lost = [r["lost_share"] for r in rows]
        out.append(f"Operations: the collision-free model ({rows[0]['ops_model'] / rows[0]['nodes']:.0f} per node "
                   f"per second) is off by {min(r['ops_error'] for r in rows):+.0%} to "
                   f"{max(r['ops_error'] for r in rows):+.0%}; the harness lost {min(lost):.0%}-{max(lost):.0%} of its "
                   "compare-and-sets to races, which the model does not predict (heartbeat timers started together "
                   "by one round stay in step, so races are not independent arrivals).")
        cpu = [(r["nodes"], r["cpu_on_measured_ops_error"]) for r in rows if r["cpu_on_measured_ops_error"] is not None]
        out.append("Store CPU: the measured operations at the measured costs give the harness' store CPU with errors "
                   + ", ".join(f"{e:+.0%} at {n}" for n, e in cpu) + ": where the store is busy the per-operation "
                   "costs hold; at low rates the harness' store spends several times more per operation than the "
                   "micro-benchmark, whose requests come back to back on one connection where the harness' come "
                   "sparse over N (not measured apart here; the smallest rows are also read to 1 ms of CPU a second).")
    b = d.get("broke")
    if b:
        verdict = ("rule it out" if b["bounds_break"] else
                   f"do not rule it out (N·w {b['serial_s']:.2f} s against K x A {b['expiry_s']:g} s, "
                   f"{b['store_cores']:.2f} store cores collision-free)")
        stall = (f"the model's collapsed round keeps {b['stall_model']:.0f} participants; the harness' store held "
                 f"{b['stall_measured']}" if b["stall_measured"] is not None else
                 f"the model's collapsed round keeps {b['stall_model']:.0f} participants (the harness read none)")
        per_op = b["store_cpu_per_op_measured"]
        out.append(f"The harness' break at {b['nodes']} nodes (x{b['dilation']:g}): the bounds, hosted as there, "
                   f"{verdict}; it broke by the collapse: every node retrying its join or heartbeat at once, the "
                   f"single-threaded store serving each in turn, about one write winning per cycle; {stall}"
                   + (f" (the store's CPU per operation there: {per_op * 1e6:.0f} µs over "
                      f"{b['store_ops_measured']:,} operations; the model's at that state: "
                      f"{b['stall_op_s'] * 1e6:.0f} µs)" if per_op else "") + "."
                   + (f" The store served {b['store_ops_per_s_measured']:,.0f} operations per perceived second, "
                      f"{b['store_ops_per_s_measured'] / b['ops_model']:.0f}x the collision-free "
                      f"{b['ops_model']:,.0f}: the retries, not the steady load, filled its core."
                      if b.get("store_ops_per_s_measured") else ""))
        if b["quota_cas_s"]:
            ratio = [b["quota_cas_s"][n] / b["plain_cas_s"][n] for n in b["quota_cas_s"] if b["plain_cas_s"][n]]
            out.append(f"The harness' quota makes each compare_set cost {min(ratio):.1f}-{max(ratio):.1f}x its "
                       f"unthrottled CPU (x{b['dilation']:g}): the harness' store is that much weaker than a real "
                       "one (an artefact of the harness), which is why the verdict rests on the real-node bounds "
                       "below, not on the harness' break alone.")
    real = [p for p in d["predictions"] if p["nodes"] == (b["nodes"] if b else PREDICT[0])]
    for p in real:
        out.append(f"Real nodes at {p['nodes']}, preset {p['preset']}: "
                   + (f"ruled out ({p['why']}); the break is torch's: one key rewritten whole by every node, "
                      "retried at once when lost; it holds unless a node turns the state around "
                      f"{p['serial_s'] / p['expiry_s']:.1f}x faster than one core of this machine (w "
                      f"{p['turnaround_s'] * 1e3:.1f} ms, most of it unpickling and pickling the state)"
                      if p["breaks"] else
                      f"not ruled out by the bounds (N·w {p['serial_s']:.1f} s against {p['expiry_s']:g} s); "
                      f"a collapse would keep {p['stall']:.0f} of the {p['min_nodes']} participants needed, so "
                      "whether it forms depends on whether a burst ignites one, which the model does not decide")
                   + ".")
    return out
