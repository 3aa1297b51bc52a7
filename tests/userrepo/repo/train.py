"""A user's own DDP training script: nothing of elastic-chaos in it.

The shape of PyTorch's DDP tutorial scripts: torchrun starts it on every node; it
trains a small classifier on synthetic data (DistributedSampler splits each epoch
between the ranks), prints one line per epoch on rank 0, saves a checkpoint from
rank 0 every --save-every epochs (a temporary file, then a rename), and resumes
from that checkpoint when torchrun restarts it. NCCL on GPUs, gloo otherwise.

    torchrun --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint localhost:29400 \\
        train.py --epochs 20 --checkpoint checkpoints/last.pt
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from trainer import build_model  # the repository's own trainer.py, beside this script

FEATURES, CLASSES = 32, 4


def synthetic_data(samples):
    """Points labelled by a fixed random linear map: the same on every rank."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, FEATURES, generator=g)
    y = (x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def resume(path, model, optimizer):
    """The epoch to start from: 0, or the one the checkpoint at ``path`` was saved after."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print(f"resumed from {path} at epoch {state['epoch']}", flush=True)
    return state["epoch"]


def save(path, model, optimizer, epoch):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--save-every", type=int, default=2, help="epochs between checkpoints")
    p.add_argument("--checkpoint", default="checkpoints/last.pt")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    args = p.parse_args()

    on_gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if on_gpu else torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(FEATURES, args.hidden, CLASSES).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = resume(args.checkpoint, model, optimizer)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if on_gpu else None)

    data = synthetic_data(args.samples)
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        began, total = time.perf_counter(), 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {total / len(loader):.4f} world {world} "
                  f"took {time.perf_counter() - began:.3f}s", flush=True)
            if (epoch + 1) % args.save_every == 0:
                save(args.checkpoint, model, optimizer, epoch + 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
