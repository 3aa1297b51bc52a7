"""Shape: progress through ``logging`` with a glog/absl-style prefix, a snapshot saved by
every node's local rank 0 on its own disk, and a resume line through ``logging``.

The shape of PyTorch's multi-GPU torchrun tutorial (``if self.gpu_id == 0:
self._save_snapshot(epoch)``: local rank 0 of *every* node writes ``snapshot.pt`` in its
working directory, written for clusters where each machine has a disk of its own), with
the logging setup of code that formats like absl (``I0501 12:00:00.123456 4242
train.py:88] epoch 3 done``). Because a node's disk goes with the node, the ranks agree at
start on the newest snapshot any of them holds and take the weights from its holder.
"""
from __future__ import annotations

import argparse
import logging
import os
import time

import torch
import torch.distributed as dist
from shape_truth import record
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class AbslFormatter(logging.Formatter):
    """``I0501 12:00:00.123456 4242 file.py:88] message``."""

    def format(self, r: logging.LogRecord) -> str:
        t = time.localtime(r.created)
        micro = int((r.created % 1) * 1e6)
        return (f"{r.levelname[0]}{t.tm_mon:02d}{t.tm_mday:02d} {time.strftime('%H:%M:%S', t)}.{micro:06d} "
                f"{r.process} {r.filename}:{r.lineno}] {r.getMessage()}")


log = logging.getLogger("train")


def agree_on_snapshot(path: str, model: nn.Module) -> int:
    """The newest snapshot any node holds: its epoch, its weights on every rank (0: none)."""
    mine = torch.load(path, weights_only=True) if os.path.isfile(path) else None
    record("local_snapshot", epoch=mine["epoch"] if mine else None, folder=os.getcwd())
    epoch = torch.tensor([mine["epoch"] if mine else 0])
    dist.all_reduce(epoch, op=dist.ReduceOp.MAX)
    if epoch.item() == 0:
        return 0
    holder = torch.tensor([dist.get_rank() if mine and mine["epoch"] == epoch.item() else dist.get_world_size()])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    if mine and dist.get_rank() == holder.item():
        model.load_state_dict(mine["model"])
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=int(holder.item()))
    if dist.get_rank() == 0:
        log.info("Resuming training from snapshot at epoch %d (held by rank %d)", epoch.item(), holder.item())
    return int(epoch.item())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--snapshot", default="snapshot.pt")
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--batch-time", type=float, default=0.1)
    args = p.parse_args()
    handler = logging.StreamHandler()
    handler.setFormatter(AbslFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    record("start", world=world)
    model = nn.Linear(16, 1)
    epoch = agree_on_snapshot(args.snapshot, model)
    record("resumed", step=epoch)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    while True:
        for _ in range(args.batches):
            began = time.time()
            loss = nn.functional.mse_loss(ddp(torch.randn(32, 16)), torch.randn(32, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, args.batch_time - (time.time() - began)))
        epoch += 1
        if rank == 0:
            log.info("epoch %d done | loss %.4f | world %d", epoch, loss.item(), world)
        record("step", step=epoch, world=world)
        if local_rank == 0 and epoch % args.save_every == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch}, args.snapshot)
            record("saved", step=epoch, path=os.path.abspath(args.snapshot))


if __name__ == "__main__":
    main()
