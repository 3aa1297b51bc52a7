"""What the toolkit costs the machine it measures on.

- Watchers: CPU time of the toolkit's own process (log followers, the etcd
  rendezvous watch, the node pool, the timeline writer — all threads of it)
  over a steady window of a 4-node job, per node per second, as a share of
  one core.
- Timeline: events per second appended (and flushed) to a JSONL timeline.
"""
from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from elastic_chaos.events import ProgressEv, Timeline
from elastic_chaos.events.progress_events import Step
from elastic_chaos.platforms.local.platform import LocalOptions
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, preset


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def watcher_overhead(out: Path, nodes: int = 4, window_s: float = 30.0) -> dict[str, Any]:
    job = preset("fast").apply(JobSpec(nodes=f"{nodes}:{nodes}", checkpoint_every=20, step_time=0.1))
    with ChaosRun(out / "overhead", scenario="bench overhead",
                  options=LocalOptions(replace_lost_nodes=False)) as run:
        run.start(job)
        run.wait_for_step(20, timeout=600)
        events_before = len(run.timeline)
        cpu0, wall0 = _cpu_s(), time.monotonic()
        time.sleep(window_s)
        cpu, wall = _cpu_s() - cpu0, time.monotonic() - wall0
        events = len(run.timeline) - events_before
    share = cpu / wall
    return {"nodes": nodes, "window_s": round(wall, 1), "toolkit_cpu_s": round(cpu, 3),
            "events": events, "events_per_s": round(events / wall, 1),
            "cpu_share_of_one_core": round(share, 4), "per_node_per_s": round(share / nodes, 5),
            "target": "< 0.02 of one core for a 4-node job", "met": share < 0.02}


def timeline_throughput(n: int = 50_000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tl = Timeline(Path(tmp) / "timeline.jsonl")
        began = time.perf_counter()
        for i in range(n):
            tl.emit(ProgressEv.STEP, "node-0", Step(step=i, rank=0, world_size=2, pid=1))
        elapsed = time.perf_counter() - began
        tl.close()
    return {"events": n, "seconds": round(elapsed, 3), "events_per_s": round(n / elapsed)}
