"""Shape: a short job that saves once, at its end; a line per epoch from rank 0, after the epoch.

The shape of many small examples: train for ``--epochs``, print ``Train Epoch: E  Loss: L`` on rank
0 once each epoch's loss is reduced, and save the model once training is over (rank 0,
``model_final.pt``). Nothing is saved before the end, so a fault before it costs every epoch
since the start; a job shorter than its fault simply finishes.
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
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--batch-time", type=float, default=0.02, help="seconds a batch takes at least (a GPU's pace)")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record("start", world=world)
    record("resumed", step=0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(args.samples, 64, generator=g), torch.randint(0, 10, (args.samples,), generator=g))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(data)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in DataLoader(data, batch_size=64, sampler=sampler):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            time.sleep(args.batch_time)
            total += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(total)
        if rank == 0:
            print(f"Train Epoch: {epoch} \tLoss: {total[0].item() / total[1].item():.6f}", flush=True)
            record("step", step=epoch, world=world)
    dist.barrier()
    if rank == 0:
        torch.save(model.module.state_dict(), "model_final.pt")
        record("saved", step=args.epochs, path=os.path.abspath("model_final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
