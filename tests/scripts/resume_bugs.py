"""A training script with the classic resume bugs, one at a time (``--bug``), for the final-state oracle.

Single process, CPU, deterministic: a linear model, SGD with momentum, a StepLR
schedule, an epoch-shuffled "loader" whose order depends on the sampler's epoch,
and input noise drawn from torch's global RNG. ``--stop-at K`` saves at step K
and exits (a job killed right after a save); run again without it, it resumes
from ``--checkpoint`` and trains to ``--max-steps``, then saves its final state
there (a ``torch.save`` file, or with ``--dcp`` a torch.distributed.checkpoint folder).

The bugs, each of which only shows after a resume:

  scheduler      the LR scheduler is neither saved nor restored (it restarts its schedule)
  rng            the RNG state is saved but not restored
  sampler-epoch  the sampler's epoch is not set from the restored epoch (epoch 0's order again)
  loader-restart the loader restarts its epoch (the position within it is not restored)
  optimizer      the optimizer's state is not restored (momentum restarts)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

BUGS = ("none", "scheduler", "rng", "sampler-epoch", "loader-restart", "optimizer")
DATASET, BATCH, FEATURES = 64, 8, 4


class Loader:
    """Epoch-shuffled batches of a fixed dataset; its order depends on ``sampler_epoch``."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(DATASET, FEATURES, generator=g)
        self.y = self.x @ torch.randn(FEATURES, 1, generator=g)
        self.epoch = self.position = self.sampler_epoch = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.position >= DATASET:
            self.epoch, self.position = self.epoch + 1, 0
            self.sampler_epoch = self.epoch   # set_epoch at each epoch's start
        order = torch.randperm(DATASET, generator=torch.Generator().manual_seed(100 + self.sampler_epoch))
        idx = order[self.position:self.position + BATCH]
        self.position += BATCH
        return self.x[idx], self.y[idx]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--stop-at", type=int)
    p.add_argument("--bug", choices=BUGS, default="none")
    p.add_argument("--dcp", action="store_true", help="save as a torch.distributed.checkpoint folder")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=5, gamma=0.7)
    loader = Loader()
    step = resume(args, model, optim, sched, loader) if args.checkpoint.exists() else 0
    while step < (args.stop_at or args.max_steps):
        x, y = loader.next()
        x = x + 0.01 * torch.randn(x.shape)   # augmentation noise: the global RNG
        optim.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optim.step()
        sched.step()
        step += 1
    state: dict[str, Any] = {"step": step, "model": model.state_dict(), "optim": optim.state_dict(),
                             "rng": {"torch": torch.get_rng_state()},
                             "data": {"epoch": loader.epoch, "position": loader.position},
                             "sampler": {"epoch": loader.sampler_epoch}}
    if args.bug != "scheduler":
        state["sched"] = sched.state_dict()
    save(state, args.checkpoint, dcp=args.dcp)
    return 0


def resume(args: argparse.Namespace, model: torch.nn.Module, optim: torch.optim.Optimizer,
           sched: torch.optim.lr_scheduler.LRScheduler, loader: Loader) -> int:
    state = torch.load(args.checkpoint, weights_only=True)
    model.load_state_dict(state["model"])
    if args.bug != "optimizer":
        optim.load_state_dict(state["optim"])
    if args.bug != "scheduler":
        sched.load_state_dict(state["sched"])
    if args.bug != "rng":
        torch.set_rng_state(state["rng"]["torch"])
    loader.epoch = state["data"]["epoch"]
    if args.bug != "loader-restart":
        loader.position = state["data"]["position"]
    if args.bug != "sampler-epoch":
        loader.sampler_epoch = state["sampler"]["epoch"]
    return int(state["step"])


def save(state: dict[str, Any], path: Path, *, dcp: bool) -> None:
    if not dcp:
        torch.save(state, path)
        return
    import torch.distributed.checkpoint as dist_cp
    dist_cp.save(state, checkpoint_id=str(path))


if __name__ == "__main__":
    sys.exit(main())
