"""An elastic PyTorch Lightning job: ``torchrun ... -m elastic_chaos.trainer.lightning_example``.

The shape of seed 002's jobs (Lightning ``ddp`` under TorchElastic), small
enough for a CPU: a tiny regression LightningModule on synthetic data, a
``ModelCheckpoint`` every N steps on the shared checkpoint directory, and a
restart that resumes from ``last.ckpt``. The only elastic-chaos line is the
``ElasticChaosCallback`` in the callbacks list.

Elastic under torchrun: the world size is only known once the rendezvous
has formed, so ``num_nodes`` is read from the environment torchrun sets
(WORLD_SIZE / LOCAL_WORLD_SIZE) each time the workers (re)start; Lightning
checks that ``devices x num_nodes`` equals WORLD_SIZE.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from elastic_chaos.trainer.lightning_callback import ElasticChaosCallback

FEATURES = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m elastic_chaos.trainer.lightning_example", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path,
                   default=Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")),
                   help="shared checkpoint directory (default: $CHECKPOINT_DIR or ./checkpoints)")
    p.add_argument("--checkpoint-every", type=int, default=20, help="optimizer steps between checkpoints")
    p.add_argument("--step-time", type=float, default=0.1, help="minimum seconds per step (sleep-padded)")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--dataset-size", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=16)
    return p.parse_args(argv)


class Regression(pl.LightningModule):
    """A two-layer MLP fitting a fixed linear map; each step padded to ``step_time``."""

    def __init__(self, step_time: float = 0.1) -> None:
        super().__init__()
        self.step_time = step_time
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        began = time.monotonic()
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        time.sleep(max(0.0, self.step_time - (time.monotonic() - began)))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def dataset(size: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return TensorDataset(x, x @ w + 0.01 * torch.randn(size, 1, generator=g))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    checkpoints = ModelCheckpoint(dirpath=args.checkpoint_dir, filename="{step}",
                                  every_n_train_steps=args.checkpoint_every, save_top_k=1,
                                  save_last=True)
    trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=local, num_nodes=max(1, world // local),
                         max_steps=args.max_steps, max_epochs=-1,
                         callbacks=[checkpoints, ElasticChaosCallback()],
                         logger=False, enable_progress_bar=False, enable_model_summary=False)
    pl.seed_everything(1234, verbose=False)
    model = Regression(args.step_time)
    loader = DataLoader(dataset(args.dataset_size), batch_size=args.batch_size, shuffle=True)
    last = args.checkpoint_dir / "last.ckpt"
    trainer.fit(model, loader, ckpt_path=str(last) if last.exists() else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
