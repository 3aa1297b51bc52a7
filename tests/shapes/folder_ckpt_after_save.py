"""Shape: a checkpoint folder of two files (model and optimizer) saved by rank 0, the epoch's line
printed after the save, and a resume line.

Many trainers save ``ckpt/model.pt`` and ``ckpt/optim.pt`` side by side, one ``torch.save`` each,
and report the epoch once everything for it is done: ``epoch E done (loss L)`` comes after the
save. A restart loads the folder and says ``resumed from epoch E``.
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=400)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--folder", default="ckpt")
    p.add_argument("--batch-time", type=float, default=0.03, help="seconds a batch takes at least (a GPU's pace)")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record("start", world=world)
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    done = 0
    if os.path.isfile(os.path.join(args.folder, "optim.pt")):
        model.load_state_dict(torch.load(os.path.join(args.folder, "model.pt"), weights_only=True))
        state = torch.load(os.path.join(args.folder, "optim.pt"), weights_only=True)
        opt.load_state_dict(state["optim"])
        done = int(state["epoch"])
        if rank == 0:
            print(f"resumed from epoch {done}", flush=True)
    record("resumed", step=done)
    ddp = DistributedDataParallel(model)
    for epoch in range(done + 1, args.epochs + 1):
        for _ in range(args.batches):
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(torch.randn(64, 32)), torch.randn(64, 1))
            loss.backward()
            opt.step()
            time.sleep(args.batch_time)
        if rank == 0 and epoch % args.save_every == 0:
            os.makedirs(args.folder, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(args.folder, "model.pt"))
            torch.save({"optim": opt.state_dict(), "epoch": epoch}, os.path.join(args.folder, "optim.pt"))
            record("saved", step=epoch, path=os.path.abspath(args.folder))
        if rank == 0:
            print(f"epoch {epoch} done (loss {loss.item():.4f})", flush=True)
            record("step", step=epoch, world=world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
