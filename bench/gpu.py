"""The benchmarks on GPUs: a worker's cold start and the presets on NCCL, beside the CPU figures.

On a machine with NVIDIA GPUs (elastic_chaos.platforms.local.gpus.detect), ``make bench``
also measures the floor on NCCL (CUDA context, NCCL communicator, checkpoint load,
one step) and kill-node and spot-interruption with each preset, the reference
trainer on NCCL, two local nodes placed on the GPUs as the local platform places
them (sharing one GPU, each with its own NCCL host id, when there are fewer GPUs
than ranks). They go to ``results.json``'s ``gpu`` block and a section of
RESULTS.md (bench/render/gpu.py); without a GPU the block says why nothing was measured.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import floor as floor_mod
from bench import recovery
from elastic_chaos.platforms.local import gpus
from elastic_chaos.spec import PgBackend

FAULTS = ("kill-node", "spot-interruption")


def cases(quick: bool) -> list[recovery.Case]:
    if quick:
        return [recovery.Case("etcd-v2", "fast", "kill-node", pg_backend=PgBackend.NCCL)]
    return [recovery.Case("etcd-v2", p, f, pg_backend=PgBackend.NCCL) for p in ("default", "fast") for f in FAULTS]


def measure(quick: bool, reps: int, runs: Path, say: Callable[[str], None], *,
            detect: Callable[[], gpus.Inventory] = gpus.detect,
            floor: Callable[..., dict[str, Any]] = floor_mod.measure_floor,
            run_case: Callable[..., recovery.CaseRun] = recovery.run_case) -> dict[str, Any]:
    """results.json's ``gpu`` block: the floor and each case on NCCL, or ``skipped`` with why."""
    inventory = detect()
    if not inventory.gpus:
        return {"skipped": f"no GPU on this machine ({inventory.why_none or 'none listed'})"}
    placement = gpus.plan(inventory.ids, slots=2, nproc_per_node=1, backend=PgBackend.NCCL)
    out: dict[str, Any] = {
        "device": ", ".join(sorted({g.name for g in inventory.gpus})), "gpus": len(inventory.gpus),
        "driver": inventory.driver, "cuda": inventory.cuda, "placement": placement.note, "recovery": {}}
    say(f"gpu floor on NCCL ({out['device']})")
    fl = floor(3 if quick else 5, backend="nccl")
    out["floor_s"], out["floor_parts"] = fl["floor_s"], fl["parts"]
    floor_s = fl["floor_s"]["median"]
    for case in cases(quick):
        say(f"gpu recovery nccl/{case.key} x{reps}")
        result = recovery.case_result(run_case(case, reps, runs / "gpu", say), floor_s)
        out["recovery"][case.key] = {**result, "floor_s": floor_s}
    return out


def findings(block: dict[str, Any], cpu: dict[str, Any]) -> list[str]:
    """What the GPU figures say against the CPU ones (nothing hard-coded)."""
    out: list[str] = []
    gpu_floor, cpu_floor = (block.get("floor_s") or {}).get("median"), (cpu.get("floor_s") or {}).get("median")
    if gpu_floor and cpu_floor:
        out.append(f"a worker's cold start takes {gpu_floor:.1f} s on NCCL vs {cpu_floor:.1f} s on CPU/gloo "
                   "(CUDA context, NCCL communicator)")
    cases: dict[str, Any] = block.get("recovery") or {}
    for key, case in cases.items():
        known = {p: v for p, s in case.items() if isinstance(s, dict) and (v := s.get("median")) is not None
                 and p not in ("recovery_s", "regain_s", "lost_steps")}
        if known:
            top = max(known, key=lambda p: known[p])
            out.append(f"nccl/{key}: the {top} phase dominates ({known[top]:.1f} s)")
        on_cpu = (cpu.get("recovery") or {}).get(key) or {}
        g, c = (case.get("recovery_s") or {}).get("median"), (on_cpu.get("recovery_s") or {}).get("median")
        if g and c:
            out.append(f"nccl/{key}: recovery {g:.1f} s vs {c:.1f} s on CPU/gloo")
    return out

