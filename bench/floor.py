"""The floor: a worker's cold start, the least any restart can cost.

Spawn the reference trainer as a single worker (world size 1, gloo; NCCL on a GPU), with a
checkpoint to resume from, and time spawn -> its first completed step, as
stamped by the trainer itself: process spawn + import torch + process-group
init + checkpoint load + one step. A restart after a fault pays at least this.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import summary
from elastic_chaos.host.etcd import free_port

PREFIX = "ELASTIC_CHAOS "


def _prepare_checkpoint(directory: Path, backend: str) -> None:
    """Train 40 steps once so the measured starts have a real checkpoint to load."""
    _run_trainer(directory, max_steps=40, checkpoint_every=40, backend=backend)


def _run_trainer(directory: Path, *, max_steps: int, checkpoint_every: int = 1000,
                 backend: str = "gloo") -> tuple[float, list[dict[str, Any]]]:
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PYTHONUNBUFFERED="1")
    env.pop("AWS_EC2_METADATA_SERVICE_ENDPOINT", None)
    cmd = [sys.executable, "-m", "elastic_chaos.trainer.train", "--checkpoint-dir", str(directory),
           "--max-steps", str(max_steps),
           "--checkpoint-every", str(checkpoint_every), "--step-time", "0", "--spot-notice", "off",
           "--backend", backend]
    spawned = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    events = [json.loads(line[len(PREFIX):]) for line in out.splitlines() if line.startswith(PREFIX)]
    return spawned, events


def measure_floor(reps: int, backend: str = "gloo") -> dict[str, Any]:
    """Median cold start over ``reps`` runs, with its parts (as stamped by the trainer);
    ``backend`` nccl: on the first GPU (CUDA context and NCCL communicator included)."""
    totals, to_start, to_loaded = [], [], []
    with tempfile.TemporaryDirectory(prefix="elastic-chaos-floor-") as tmp:
        ckpt = Path(tmp)
        _prepare_checkpoint(ckpt, backend)
        for _ in range(reps):
            spawned, events = _run_trainer(ckpt, max_steps=41, backend=backend)
            by = {e["ev"]: e["t"] for e in events}
            first_step = next(e["t"] for e in events if e["ev"] == "step")
            totals.append(first_step - spawned)
            to_start.append(by["start"] - spawned)               # spawn + import torch
            to_loaded.append(by["checkpoint_loaded"] - by["start"])  # pg init + model + load
    return {"floor_s": summary(totals), "parts": {"spawn_import_s": summary(to_start),
                                                   "pg_init_and_load_s": summary(to_loaded)}}
