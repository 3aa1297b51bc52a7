"""RESULTS.md's last sections: checkpoint integrity, the toolkit's own overhead, and its figures' fidelity.

Each renders its block of results.json (bench/integrity.py, bench/overhead.py, bench/fidelity.py).
"""
from __future__ import annotations

from typing import Any

from bench.render import Plots


def markdown(results: dict[str, Any], plots: Plots) -> list[str]:
    return integrity(results) + overhead(results) + fidelity(results)


def integrity(results: dict[str, Any]) -> list[str]:
    integ = results.get("integrity") or {}
    if not integ:
        return []
    return ["## Checkpoint integrity", "",
            f"{integ.get('repetitions')} kills of the node writing a checkpoint, each while it wrote: "
            f"{integ.get('resumed_from_complete')} restarts resumed from the newest complete checkpoint, "
            f"{integ.get('corrupt_seen')} corrupt checkpoints met — "
            f"{'never a partial one' if integ.get('all_ok') else 'FAILED'}.", ""]


def overhead(results: dict[str, Any]) -> list[str]:
    over = results.get("overhead") or {}
    if not over:
        return []
    w, t = over.get("watchers", {}), over.get("timeline", {})
    return ["## Overhead", "",
            f"- Watchers (the toolkit's whole process) during a steady {w.get('nodes')}-node job: "
            f"{w.get('toolkit_cpu_s')} s CPU over {w.get('window_s')} s = "
            f"{100 * (w.get('cpu_share_of_one_core') or 0):.2f} % of one core "
            f"({100 * (w.get('per_node_per_s') or 0):.3f} % per node); target < 2 %: "
            f"{'met' if w.get('met') else 'NOT met'}. {w.get('events_per_s')} events/s recorded.",
            f"- Timeline writes: {t.get('events_per_s')} events/s (append + flush per event).", ""]


def fidelity(results: dict[str, Any]) -> list[str]:
    fid = results.get("fidelity") or {}
    if not fid:
        return []
    lines = ["## Fidelity", "", f"Ground truth: {fid.get('ground_truth')}; {fid.get('runs')} runs compared.", "",
             "| metric | worst absolute error |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in (fid.get("worst_abs_error") or {}).items()]
    sd = fid.get("store_detections") or {}
    if sd.get("faults"):
        lines += ["", f"- detect_s of {sd['faults']} faults came from the store (a rendezvous state change "
                      "seen in etcd, e.g. a keep-alive expiring) or from a worker's traceback (stamped when "
                      "read), neither stamped at the source; they are not in the table. That evidence led "
                      f"the agents' own first line by {sd['median_lead_s']} s "
                      f"(median), {sd['max_lead_s']} s at most: after a partition the keep-alive expires "
                      "long before the survivors' collective times out."]
    lines += ["", fid.get("note", ""), ""]
    if fid.get("recomputed"):
        lines += [f"Recomputed {fid['recomputed']}.", ""]
    return lines
