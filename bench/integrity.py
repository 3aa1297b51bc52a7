"""Checkpoint integrity under fire: kill the writing node during N checkpoint writes.

One job, N repetitions of kill-during-checkpoint (armed on "checkpoint
started", the trainer's --save-delay widening the write to 1 s), each
followed by a replacement. Every restart must resume from the newest
COMPLETE checkpoint, never the interrupted one, and never meet a corrupt file.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from elastic_chaos.events import CheckpointEv
from elastic_chaos.faults import KillDuringCheckpoint
from elastic_chaos.faults.triggers import checkpoint_started
from elastic_chaos.platforms.local.platform import LocalOptions
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, preset


def kill_during_checkpoint(reps: int, out: Path, say: Callable[[str], None]) -> dict[str, Any]:
    job = preset("fast").apply(JobSpec(nodes="1:2", checkpoint_every=20, max_restarts=100,
                                       trainer_args=("--save-delay", "1.0")))
    rows: list[dict[str, Any]] = []
    with ChaosRun(out / "integrity", scenario="bench kill-during-checkpoint",
                  options=LocalOptions(provisioning_delay_s=1.0)) as run:
        run.start(job)
        run.wait_for_step(30, timeout=300)
        for i in range(reps):
            fault = run.arm(KillDuringCheckpoint(), checkpoint_started(min_step=30)).wait(timeout=300)
            rec = run.wait_for_recovery(fault, timeout=300)
            interrupted = fault.detail.get("checkpoint_step")
            ok = bool(fault.detail.get("during_write")) and rec.resumed_from_step is not None \
                and interrupted is not None and rec.resumed_from_step < int(interrupted)
            rows.append({"interrupted_step": interrupted, "during_write": fault.detail.get("during_write"),
                         "resumed_from_step": rec.resumed_from_step, "ok": ok})
            say(f"  integrity #{i + 1}: interrupted {interrupted}, resumed {rec.resumed_from_step}: "
                f"{'ok' if ok else 'BAD'}")
            if i + 1 < reps:
                run.wait_for_world_size(fault, 2, timeout=300)
        corrupt = len(run.timeline.select(CheckpointEv.CORRUPT))
    return {"repetitions": reps, "resumed_from_complete": sum(r["ok"] for r in rows),
            "corrupt_seen": corrupt, "all_ok": all(r["ok"] for r in rows) and corrupt == 0, "runs": rows}
