"""Shape: progress printed every batch, rank 0 saves through a temporary file and a rename,
every rank says which checkpoint it loaded.

Written in the shape of the torchelastic ImageNet example (a global step counter in the
checkpoint, ``=> loaded checkpoint`` at start, rank 0 writing ``checkpoint.pth.tar`` via a
temporary file and ``os.replace`` so a reader never sees half a file), shrunk to a linear
model on random data so that a step takes ``--step-time`` seconds on a CPU.
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
    p.add_argument("--checkpoint", default="checkpoint.pth.tar")
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--step-time", type=float, default=0.25)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record("start", world=world)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.isfile(args.checkpoint):
        state = torch.load(args.checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"=> loaded checkpoint '{args.checkpoint}' (step {step})", flush=True)
    record("resumed", step=step)
    ddp = DistributedDataParallel(model)
    while True:
        began = time.time()
        x, y = torch.randn(32, 16), torch.randn(32, 1)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} lr 0.01", flush=True)
        record("step", step=step, world=world)
        if rank == 0 and step % args.save_every == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
            record("saved", step=step, path=os.path.abspath(args.checkpoint))
        time.sleep(max(0.0, args.step_time - (time.time() - began)))


if __name__ == "__main__":
    main()
