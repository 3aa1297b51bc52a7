"""How many real nodes the local platform runs here: formation and recovery of torchrun jobs of N nodes.

Each size runs ``nodes = N-1:N`` (so the job can shrink by one) with the fast
preset and slow, tiny steps. Formation is job start -> the first step at
world size N; recovery is one hard kill -> the first step of the re-formed
world. Memory per node is the resident set of every process of a node
(agent + worker), averaged over nodes, in steady state. results.json keeps
each size as a :class:`NodesRun` (its ``scale`` list, RESULTS.md's "Scale"
table); the rendezvous lab replays these jobs to check its harness against
torchrun (bench/rdzv/validate.py), reading their :class:`RdzvLog`.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.json_record import JsonRecord, optional, read
from elastic_chaos.errors import ChaosError
from elastic_chaos.events import AgentEv, Event, ProgressEv
from elastic_chaos.events.timeline import of
from elastic_chaos.faults import KillNode
from elastic_chaos.platforms.local.platform import LocalOptions, LocalPlatform
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, preset


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def node_memory_mb(platform: LocalPlatform) -> float:
    alive = platform.alive_nodes()
    per_node = [sum(rss_mb(p) for p in platform.node_pids(n.name)) for n in alive]
    return sum(per_node) / len(per_node) if per_node else 0.0


@dataclass(frozen=True)
class RdzvLog(JsonRecord):
    """One real job's rendezvous, as its agents logged it (rendezvous_figures)."""

    offsets_s: tuple[float, ...] = ()
    formation_s: float | None = None
    reformation_s: float | None = None
    restarts_s: tuple[float, ...] | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RdzvLog:
        return cls(**read(cls, raw, offsets_s=tuple, restarts_s=optional(tuple)))


@dataclass(frozen=True)
class NodesRun(JsonRecord):
    """One size's real job: what it measured before it ended (``ok``), or where it stopped (``error``)."""

    nodes: int
    formation_s: float | None = None
    memory_per_node_mb: float | None = None
    load_avg_1m: float | None = None
    recovery_s: float | None = None
    phases: dict[str, float | None] = field(default_factory=dict)
    ok: bool = False
    rdzv: RdzvLog | None = None
    error: str | None = None
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False, kw_only=True)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NodesRun:
        return cls(**read(cls, raw, rdzv=optional(RdzvLog.from_json)))


def rendezvous_figures(events: list[Event], n: int, fault_t: float, victim: str | None) -> RdzvLog:
    """The rendezvous alone, as torchrun's agents logged it (what bench/rdzv/validate.py's harness is
    checked against): when each node first started to rendezvous (``offsets_s`` from the first),
    the last node's start -> every node's rendezvous complete in the world of ``n`` (``formation_s``),
    the fault -> every survivor's rendezvous complete in the world of ``n - 1`` (``reformation_s``), and the
    fault -> each survivor's agent starting that rendezvous (``restarts_s``: its worker's collective failing,
    the agent seeing it and stopping the group; the harness replays these, as it replays ``offsets_s``)."""
    starts: dict[str, float] = {}
    for e in of(events, AgentEv.RENDEZVOUS_STARTED):
        if e.node is not None:
            starts.setdefault(e.node, e.t)
    completes = of(events, AgentEv.RENDEZVOUS_COMPLETE)
    formed: dict[str, float] = {}
    for c in completes:
        if c.node is not None and c.data.group_world_size == n:
            formed.setdefault(c.node, c.t)
    reformed: dict[str, float] = {}
    for c in completes:
        if c.node is not None and c.node != victim and c.t >= fault_t and c.data.group_world_size == n - 1:
            reformed.setdefault(c.node, c.t)
    first = min(starts.values(), default=0.0)
    out: dict[str, Any] = {"offsets_s": sorted(round(t - first, 3) for t in starts.values())}
    out["formation_s"] = round(max(formed.values()) - max(starts.values()), 3) \
        if len(formed) == n and len(starts) == n else None
    out["reformation_s"] = round(max(reformed.values()) - fault_t, 3) if len(reformed) == n - 1 else None
    restarted: dict[str, float] = {}
    for e in of(events, AgentEv.RENDEZVOUS_STARTED):
        if e.node is not None and e.node != victim and e.t >= fault_t:
            restarted.setdefault(e.node, e.t)
    out["restarts_s"] = sorted(round(t - fault_t, 3) for t in restarted.values()) if len(restarted) == n - 1 else None
    return RdzvLog.from_json(out)


def run_size(n: int, out: Path, say: Callable[[str], None], timeout: float = 600.0) -> NodesRun:
    """One real job of ``n`` local nodes, formed then one node killed (blocks up to ``timeout`` per wait); a
    ChaosError ends it with what it had measured and why (``error``)."""
    job = preset("fast").apply(JobSpec(nodes=f"{n - 1}:{n}", checkpoint_every=50, step_time=0.5,
                                       max_restarts=10, trainer_args=("--batch-size", "4")))
    result: dict[str, Any] = {"nodes": n}
    started = time.time()
    try:
        with ChaosRun(out / f"scale-{n}", scenario=f"bench scale {n}",
                      options=LocalOptions(replace_lost_nodes=False)) as run:
            run.start(job)
            formed = run.wait_for(f"training at world size {n}",
                                  lambda e: e.type == ProgressEv.STEP and e.data.world_size == n, timeout)
            result["formation_s"] = round(formed.t - started, 2)
            run.wait_for_steps(5, timeout=timeout)
            assert isinstance(run.platform, LocalPlatform)
            result["memory_per_node_mb"] = round(node_memory_mb(run.platform), 1)
            result["load_avg_1m"] = round(os.getloadavg()[0], 2)
            fault = run.inject(KillNode())
            rec = run.wait_for_recovery(fault, timeout=timeout)
            result["recovery_s"] = round(rec.recovery_s, 2) if rec.recovery_s is not None else None
            result["phases"] = {k: (round(v, 2) if v is not None else None) for k, v in rec.phases.items()}
            result["ok"] = True
            result["rdzv"] = rendezvous_figures(run.timeline.events(), n, fault.injected_at, fault.target).to_json()
    except ChaosError as exc:
        result["ok"] = False
        result["error"] = str(exc).splitlines()[0][:300]
    say(f"  scale {n} nodes: {result}")
    return NodesRun.from_json(result)
