"""Shape: a line once per epoch, printed at its first iteration; every node's local rank 0 saves one
snapshot file into the shared working directory and says so after the save; no SIGTERM handler.

The shape of many multi-node trainers written for machines with disks of their own (``if
local_rank == 0: save``), run on a shared volume: both nodes write ``snapshot.pt`` at the same
moment. Progress is ``[GPU<rank>] Epoch E | Iter 0 | Train Loss L`` after the first batch of
epoch E; the snapshot holds the last finished epoch, and a restart resumes after it without a
line that says so. The shared file is read by every rank at start.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from shape_truth import record
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=400)
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--snapshot", default="snapshot.pt")
    p.add_argument("--batch-time", type=float, default=0.01, help="seconds a batch takes at least (a GPU's pace)")
    p.add_argument("--state-mb", type=int, default=8,
                   help="megabytes of other state in the snapshot (an optimizer's): a save as long as a real one's, "
                        "so both nodes' writes of the shared file overlap")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    record("start", world=world)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 32, generator=g), torch.randn(args.samples, 1, generator=g))
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
    first = 0
    if os.path.exists(args.snapshot):
        snap = torch.load(args.snapshot, weights_only=True)
        model.load_state_dict(snap["model"])
        first = snap["finished_epoch"] + 1
    record("resumed", step=first - 1 if first else 0)   # the last epoch line before its save
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        for it, (x, y) in enumerate(loader):
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            time.sleep(args.batch_time)
            if it == 0:
                print(f"[GPU{rank}] Epoch {epoch} | Iter {it} | Train Loss {loss.item():.5f}", flush=True)
                if rank == 0:   # the line a --progress-regex on [GPU0] reads
                    record("step", step=epoch, world=world)
        if local_rank == 0 and epoch % args.save_every == 0:
            torch.save({"model": model.state_dict(), "finished_epoch": epoch,
                        "other": torch.zeros(args.state_mb * 262144)}, args.snapshot)
            record("saved", step=epoch, path=os.path.abspath(args.snapshot))
            print(f"Epoch {epoch} | Training snapshot saved at {args.snapshot}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
