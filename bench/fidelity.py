"""How far the toolkit's figures are from ground truth stamped at the source.

For each measured run: metrics are recomputed offline from sources only — the
trainer's own lines and the torchrun agents' own log stamps, read straight
from the node log files, plus the fault's own timestamp — and compared with
the live report. Live, the rendezvous is observed through an etcd watch
(stamped on arrival); offline, by the agents' own "Rendezvous complete"
stamps. The worst absolute error per metric is reported.

Two kinds of evidence have no stamp at the source: a rendezvous state change seen
in etcd (an etcd-v2 keep-alive key expiring after a partition), on which etcd
stamps no time, and a worker's traceback line (a gloo collective that failed),
stamped when the log follower read it. A detection that came from either is not
an error against a later agent line: it is reported apart, as how far it led the
agents' own word (``store_detections``). NCCL's watchdog lines carry their own
stamps and count as ground truth.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.stats import summary
from elastic_chaos.analysis.recovery_analysis import analyze_fault, faults_in, window_end
from elastic_chaos.events import Event, ProgressEv, RdzvEv, Source, of, read_events
from elastic_chaos.watchers.logs import _AgentParser, parse_progress
from elastic_chaos.watchers.nccl import parse_nccl
from elastic_chaos.watchers.sources import without_tee

METRICS = ("detect_s", "rendezvous_s", "recovery_s", "regain_s", "lost_steps", "resumed_from_step")


def source_events(run_dir: Path, live_events: list[Event]) -> list[Event]:
    """Events from the node logs and the run's fault/node records only (no watcher); agent log
    times read in the zone the run's platform logs in (pods: UTC)."""
    from elastic_chaos.reporting.render import log_timezone
    try:
        raw = json.loads((run_dir / "report.json").read_text())
        platform, offset = str(raw.get("platform") or "local"), raw.get("log_utc_offset_s")
    except (OSError, ValueError):
        platform, offset = "local", None
    tz = log_timezone(platform, offset if isinstance(offset, (int, float)) else None)
    events: list[Event] = []
    for log in sorted((run_dir / "nodes").glob("*.log")):
        node = log.stem
        parser = _AgentParser(node, tz)
        for line in log.read_text(errors="replace").splitlines():
            ev = parse_progress(line, node) or parse_nccl(without_tee(line), node)   # a worker's copy: its prefix off
            events.extend([ev] if ev is not None else parser.feed(line))
    events += of(live_events, Source.FAULT, Source.NODE)
    return events


def compare_run(run_dir: Path, store_leads: list[float] | None = None) -> dict[str, float]:
    report = json.loads((run_dir / "report.json").read_text())
    live_events = list(read_events(run_dir / "timeline.jsonl"))
    truth_events = source_events(run_dir, live_events)
    # the same recovery windows as the live report: a cascade stays in its fault's window
    marks = [(e.t, e.data.trigger is not None) for e in faults_in(live_events)]
    worst: dict[str, float] = {}
    for fault in report.get("faults", []):
        until = window_end(fault["injected_at"], marks)
        truth = analyze_fault(truth_events, fault=fault["kind"], target=fault["target"],
                              injected_at=fault["injected_at"], until=until)
        live = fault["metrics"]
        store_side = _unstamped_detection(live_events, fault, live.get("detect_s"))
        for metric in METRICS:
            a, b = live.get(metric), getattr(truth, metric)
            if metric == "detect_s" and store_side:
                if store_leads is not None and a is not None and b is not None:
                    store_leads.append(float(b) - float(a))
                continue
            if a is None or b is None:
                continue
            worst[metric] = max(worst.get(metric, 0.0), abs(float(a) - float(b)))
    return worst


def _unstamped_detection(events: list[Event], fault: dict[str, Any], said: Any) -> bool:
    """Whether the live report's detect_s came from evidence with no stamp at the source
    (a rendezvous state seen in etcd, a traceback stamped when read)."""
    if not isinstance(said, (int, float)):
        return False
    f = fault["injected_at"]
    return any(abs(e.t - f - said) < 1e-3 and (e.type.source == Source.RENDEZVOUS or e.data.via != "nccl")
               for e in of(events, RdzvEv.STATE, ProgressEv.WORKER_ERROR, after=f) if e.node != fault["target"])


def fidelity(run_dirs: list[Path]) -> dict[str, Any]:
    worst: dict[str, float] = {}
    leads: list[float] = []
    compared = 0
    for d in run_dirs:
        if not (d / "report.json").exists():
            continue
        compared += 1
        for metric, err in compare_run(d, leads).items():
            worst[metric] = max(worst.get(metric, 0.0), err)
    lead = summary(leads)
    return {"runs": compared, "worst_abs_error": {k: round(v, 3) for k, v in worst.items()},
            "store_detections": {"faults": len(leads), "max_lead_s": lead["max"], "median_lead_s": lead["median"]},
            "ground_truth": "trainer and agent log stamps read from node logs; fault records"}
