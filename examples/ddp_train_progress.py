"""examples/ddp_train.py with the two-line integration (docs/INTEGRATE.md).

`from elastic_chaos.trainer import progress`, and one call where an epoch ends, a snapshot is
saved and a snapshot is loaded: elastic-chaos then reads exact steps, save times
and the exact resumed step instead of inferring them from log lines.

    torchrun --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint localhost:29400 \\
        examples/ddp_train_progress.py --epochs 50 --save-every 2
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from elastic_chaos.trainer import progress


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path, batch_time):
        self.rank = dist.get_rank()
        self.model = model
        self.data = data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.batch_time = batch_time
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(model)

    def _load_snapshot(self, path):
        snapshot = torch.load(path, weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}", flush=True)
        progress.report_checkpoint_loaded(self.epochs_run, path)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snapshot, self.snapshot_path + ".tmp")
        os.replace(self.snapshot_path + ".tmp", self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)
        progress.report_checkpoint_saved(epoch + 1, self.snapshot_path)

    def _run_batch(self, source, targets):
        began = time.time()
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        time.sleep(max(0.0, self.batch_time - (time.time() - began)))  # pace like a GPU step
        return loss.item()

    def _run_epoch(self, epoch):
        self.data.sampler.set_epoch(epoch)
        for source, targets in self.data:
            loss = self._run_batch(source, targets)
        if self.rank == 0:
            print(f"Epoch {epoch} done | loss {loss:.4f} | world {dist.get_world_size()}", flush=True)
        progress.report_step(epoch + 1, epoch=epoch, loss=loss)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and (epoch + 1) % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batch-time", type=float, default=0.1)
    p.add_argument("--snapshot-path", default="snapshot.pt")
    args = p.parse_args()
    dist.init_process_group(backend="gloo")
    torch.manual_seed(0)
    x = torch.randn(256, 20)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    model = torch.nn.Linear(20, 1)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), args.save_every,
                      args.snapshot_path, args.batch_time)
    trainer.train(args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
