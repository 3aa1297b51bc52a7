"""Shape: progress printed once per epoch, no checkpoint at all, nothing printed at start.

The shape of a first DDP script (PyTorch's "getting started with DDP" tutorial grown a
loop over epochs): each epoch runs a few batches through a DistributedSampler-like split
and rank 0 prints ``Epoch N | loss ... | world W`` when it ends. A restart starts from
epoch 1 again: everything trained before a fault is lost.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from shape_truth import record
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--batch-time", type=float, default=0.1)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record("start", world=world)
    record("resumed", step=0)
    ddp = DistributedDataParallel(nn.Linear(16, 1))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    epoch = 0
    while True:
        epoch += 1
        for _ in range(args.batches):
            began = time.time()
            loss = nn.functional.mse_loss(ddp(torch.randn(32, 16)), torch.randn(32, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, args.batch_time - (time.time() - began)))
        if rank == 0:
            print(f"Epoch {epoch} | loss {loss.item():.4f} | world {world}", flush=True)
        record("step", step=epoch, world=world)


if __name__ == "__main__":
    main()
