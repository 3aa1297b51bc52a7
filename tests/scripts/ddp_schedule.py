"""A DDP script with momentum and an LR schedule, for --compare-final on a user's script (its clean twin).

Nothing of elastic-chaos in it. Seeded and deterministic on CPU/gloo: the same world size trains the
same model. Prints ``epoch N done`` per epoch (rank 0), saves model, optimizer and LR scheduler to a
relative ``--snapshot`` through a rename every ``--save-every`` epochs (and at its last), resumes from
it when torchrun restarts it. ``--bug scheduler`` leaves the scheduler out of the snapshot: a resumed run
restarts the LR schedule, which only an uninterrupted twin shows.
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--batch-time", type=float, default=0.05)
    p.add_argument("--snapshot", default="snapshot.pt")
    p.add_argument("--bug", choices=["none", "scheduler"], default="none")
    args = p.parse_args()
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    data = TensorDataset(x, x @ torch.randn(16, 1))
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Linear(16, 1)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=3, gamma=0.5)
    first = 0
    if os.path.exists(args.snapshot):
        snap = torch.load(args.snapshot, weights_only=True)
        model.load_state_dict(snap["model"])
        optim.load_state_dict(snap["optimizer"])
        if "scheduler" in snap:
            sched.load_state_dict(snap["scheduler"])
        first = snap["epochs_run"]
        print(f"resumed from epoch {first}", flush=True)
    ddp = DDP(model)
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        for source, target in loader:
            began = time.time()
            optim.zero_grad()
            F.mse_loss(ddp(source), target).backward()
            optim.step()
            time.sleep(max(0.0, args.batch_time - (time.time() - began)))
        sched.step()
        if rank == 0:
            print(f"epoch {epoch + 1} done", flush=True)
            if (epoch + 1) % args.save_every == 0 or epoch + 1 == args.epochs:
                snap = {"model": model.state_dict(), "optimizer": optim.state_dict(), "epochs_run": epoch + 1}
                if args.bug != "scheduler":
                    snap["scheduler"] = sched.state_dict()
                torch.save(snap, args.snapshot + ".tmp")
                os.replace(args.snapshot + ".tmp", args.snapshot)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
