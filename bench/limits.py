"""Each measured recovery beside the mechanism's own limit for its settings (elastic_chaos/analysis/limits.py).

For the cases to a smaller world whose limit the toolkit computes -- a node killed, a spot interruption
(waited out, or left with ``+leave``) -- :func:`annotate` stores in each case its ``limit``: the least and
the most the mechanism takes with the case's preset, its own measured detection and the floor of its run,
the measured recovery as a multiple of the most, and, past 1.1 times it, the phase that took the
difference. Other cases say why none is computed. bench/render/recovery.py prints what is stored here.
"""
from __future__ import annotations

from typing import Any

from bench.stats import median
from elastic_chaos.analysis.limits import shrink_limit
from elastic_chaos.scale.expect import knobs
from elastic_chaos.spec import PRESET_OPTION, PRESETS, job_from_options

WITHIN = 1.1
"""A recovery up to this many times the limit's most is at the limit (the issue's 10 %)."""


def _knobs(preset: str) -> dict[str, int] | None:
    """The case's rendezvous knobs as a job with its preset has them (``default``: torch's); None: unknown."""
    if preset != "default" and preset not in PRESETS:
        return None
    return knobs(job_from_options({} if preset == "default" else {PRESET_OPTION: preset}).rdzv)


def limit_of(key: str, case: dict[str, Any]) -> dict[str, Any]:
    """The ``limit`` entry of the case ``key`` (``<backend>/<preset>/<fault>[+leave]``)."""
    if key.startswith("cluster:"):
        return {"none": "a pod's scheduling and start on a cluster are not part of the mechanism's limit"}
    parts = key.split("/")
    fault, left = (parts[-1].removesuffix("+leave"), parts[-1].endswith("+leave")) if len(parts) == 3 else ("", False)
    if fault not in ("kill-node", "spot-interruption"):
        return {"none": "no limit computed for this fault (a partition's heartbeat expiry runs during its "
                        "detection, which the collective timeout bounds)"}
    knobs = _knobs(parts[1])
    detect, recovery, floor = median(case.get("detect")), median(case.get("recovery_s")), case.get("floor_s")
    if knobs is None or detect is None or recovery is None or floor is None:
        return {"none": "the case lacks its preset, detection, recovery or floor"}
    limit = shrink_limit(detect_s=detect, floor_s=float(floor), keep_alive_interval=knobs["keep_alive_interval"],
                         keep_alive_max_attempt=int(knobs["keep_alive_max_attempt"]),
                         last_call_s=knobs["last_call_timeout"], left=left)
    out: dict[str, Any] = {"low_s": round(limit.low_s, 3), "high_s": round(limit.high_s, 3),
                           "x_high": round(recovery / limit.high_s, 2)}
    if recovery > WITHIN * limit.high_s:
        phases = {p: m for p in ("detect", "rendezvous", "restart") if (m := median(case.get(p))) is not None}
        beyond = limit.beyond(phases)
        if beyond is not None:
            out["beyond"] = [beyond[0], round(beyond[1], 3)]
    return out


def annotate(results: dict[str, Any]) -> None:
    """Store each recovery case's ``limit`` (in place): the CPU's and, where measured, the GPU block's."""
    for cases in (results.get("recovery"), (results.get("gpu") or {}).get("recovery")):
        for key, case in (cases or {}).items():
            case["limit"] = limit_of(key, case)
