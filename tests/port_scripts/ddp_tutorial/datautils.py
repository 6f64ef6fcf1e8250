"""Reproduces the pattern of pytorch/examples/distributed/ddp-tutorial-series/datautils.py (not a copy): a sibling
module with a synthetic map-style Dataset of (input, target) pairs sized by its constructor. Our own code."""

import torch
from torch.utils.data import Dataset


class RandomPairs(Dataset):
    def __init__(self, size: int) -> None:
        rng = torch.Generator().manual_seed(0)
        self.x = torch.rand(size, 10, generator=rng)
        self.y = torch.rand(size, 1, generator=rng)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]
