"""A resumable elastic sampler: every sample of an epoch exactly once, across resizes.

torch's DistributedSampler shards an epoch by ``rank::world_size``; restarting
mid-epoch with another world size (or from the start of the epoch) trains some
samples twice and others never. Here the job walks one global, per-epoch
permutation with a cursor: each step consumes the next ``batch * world_size``
positions, rank ``r`` taking its contiguous slice. The cursor is part of the
checkpoint, so a restore at any world size continues exactly where the
committed history stopped.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ElasticSampler:
    dataset_size: int
    batch_per_rank: int
    seed: int = 0
    epoch: int = 0
    cursor: int = 0

    def permutation(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.dataset_size, generator=g)

    def next_batch(self, rank: int, world_size: int) -> tuple[int, list[int], torch.Tensor]:
        """Indices for ``rank`` in the next step, and the epoch and [start, stop)
        position range they occupy in that epoch's order; advances the cursor.

        The last step of an epoch may be short: positions past the end are
        not wrapped into the next epoch, so the accounting stays per epoch.
        """
        if self.cursor >= self.dataset_size:
            self.epoch += 1
            self.cursor = 0
        step_size = self.batch_per_rank * world_size
        start = min(self.cursor + rank * self.batch_per_rank, self.dataset_size)
        stop = min(start + self.batch_per_rank, self.dataset_size)
        epoch = self.epoch
        indices = self.permutation()[start:stop]
        self.cursor = min(self.cursor + step_size, self.dataset_size)
        return epoch, [start, stop], indices

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
