"""A training script whose output floods its log: 100 MB of lines at once, then 300 MB without a newline.

Steps are plain ``step N`` lines, 0.1 s apart, on rank 0. At step 10 rank 0 prints 100 MB of lines as
fast as it can; at step 20 it prints 300 MB with no newline at all (a progress bar gone wrong), then
one. It trains on after both. Nothing is saved.
"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

MB = 1024 * 1024


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = sys.stdout
    for step in range(1, 100_000):
        dist.all_reduce(torch.ones(4))
        if rank == 0:
            print(f"step {step}", flush=True)
            if step == 10:
                line = "x" * 1023 + "\n"
                out.write(line * (100 * MB // len(line)))
                out.flush()
            if step == 20:
                block = "y" * MB
                for _ in range(300):
                    out.write(block)
                out.write("\n")
                out.flush()
        time.sleep(0.1)
    os._exit(0)


if __name__ == "__main__":
    main()
