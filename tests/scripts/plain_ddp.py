"""A plain DDP training script, the way people write them: nothing of elastic-chaos in it.

Its own log format (``[plain-ddp] iter=00042 loss=...`` on rank 0), its own
snapshot file (``--snapshot``, written atomically every ``--save-every``
iterations by rank 0, and by whichever rank is told to stop with SIGTERM), and
its own resume line. The tests run it under ``elastic-chaos run ... -- plain_ddp.py``.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STOP = {"signal": 0}


def on_sigterm(signum, _frame):
    STOP["signal"] = signum


def save(path, model, opt, iteration):
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "iter": iteration}, tmp)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=100_000)
    p.add_argument("--snapshot", default="snapshot.pt")
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--iter-time", type=float, default=0.2)
    p.add_argument("--crash-once-at", type=int, default=0,
                   help="the first incarnation of the last rank crashes at this iteration (a warm-up bug)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = 0
    if os.path.exists(args.snapshot):
        snap = torch.load(args.snapshot, weights_only=True)
        model.load_state_dict(snap["model"])
        opt.load_state_dict(snap["opt"])
        it = snap["iter"]
        print(f"[plain-ddp] rank {rank} restored snapshot of iter {it}", flush=True)

    while it < args.iters:
        began = time.time()
        x = torch.randn(16, 8)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        it += 1
        if rank == 0:
            print(f"[plain-ddp] iter={it:05d} world={world} loss={loss.item():.4f}", flush=True)
        if it == args.crash_once_at and rank == world - 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            raise RuntimeError(f"[plain-ddp] rank {rank} crashed at iter {it} (a warm-up bug)")
        if STOP["signal"]:
            save(args.snapshot, model, opt, it)  # told to go: every rank holds the same weights
            print(f"[plain-ddp] rank {rank} saved iter {it} on signal {STOP['signal']}", flush=True)
            return 0
        if rank == 0 and it % args.save_every == 0:
            save(args.snapshot, model, opt, it)
        time.sleep(max(0.0, args.iter_time - (time.time() - began)))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
