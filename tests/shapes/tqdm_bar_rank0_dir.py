"""Shape: a tqdm-style progress bar redrawn with carriage returns (no newline between
epochs), rank 0 saving one file per epoch into a directory and deleting the older one,
and a silent resume.

The shape of a PyTorch Lightning run: one training bar for the whole fit, reset at each
epoch (``Epoch 3:  50%|#####     | 2/4 [...]``), written to stderr with ``\\r`` and no
``\\n`` until training ends; ModelCheckpoint's ``epoch=E-step=S.ckpt`` names, keeping
the newest only (save_top_k=1); ``ckpt_path="last"`` resuming without a line of its
own. Epochs count from 0, as Lightning's do.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import time

import torch
import torch.distributed as dist
from shape_truth import record
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def bar(epoch: int, done: int, total: int, began: float, loss: float) -> str:
    """One redraw of the bar, tqdm's layout."""
    width = 10
    fill = "#" * (width * done // total)
    rate = done / max(1e-6, time.time() - began)
    return (f"\rEpoch {epoch}: {100 * done // total:3d}%|{fill:<{width}}| {done}/{total} "
            f"[00:0{min(9, int(time.time() - began))}<00:00, {rate:5.2f}it/s, loss={loss:.3f}, v_num=0]")


def latest(folder: str) -> tuple[str, int, int] | None:
    found = []
    for path in glob.glob(os.path.join(folder, "*.ckpt")):
        m = re.search(r"epoch=(\d+)-step=(\d+)\.ckpt$", path)
        if m:
            found.append((path, int(m[1]), int(m[2])))
    return max(found, key=lambda f: f[2]) if found else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dirpath", default="lightning_logs/version_0/checkpoints")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--batch-time", type=float, default=0.1)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    record("start", world=world)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    epoch, step = 0, 0
    last = latest(args.dirpath)
    if last is not None:  # ckpt_path="last": restored without a word
        state = torch.load(last[0], weights_only=True)
        model.load_state_dict(state["state_dict"])
        epoch, step = state["epoch"] + 1, state["global_step"]
    record("resumed", step=epoch - 1)
    ddp = DistributedDataParallel(model)
    out = sys.stderr
    while True:
        began = time.time()
        loss = torch.tensor(0.0)
        if rank == 0:
            out.write(bar(epoch, 0, args.batches, began, 0.0))
            out.flush()
        for i in range(args.batches):
            t0 = time.time()
            loss = nn.functional.mse_loss(ddp(torch.randn(32, 16)), torch.randn(32, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            time.sleep(max(0.0, args.batch_time - (time.time() - t0)))
            if rank == 0:
                out.write(bar(epoch, i + 1, args.batches, began, loss.item()))
                out.flush()
        record("step", step=epoch, world=world)
        if rank == 0:
            os.makedirs(args.dirpath, exist_ok=True)
            path = os.path.join(args.dirpath, f"epoch={epoch}-step={step}.ckpt")
            torch.save({"state_dict": model.state_dict(), "epoch": epoch, "global_step": step}, path)
            record("saved", step=epoch, path=os.path.abspath(path))
            for old in glob.glob(os.path.join(args.dirpath, "*.ckpt")):
                if old != path:
                    os.remove(old)
        epoch += 1


if __name__ == "__main__":
    main()
