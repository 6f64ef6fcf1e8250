"""Reproduces the pattern of pytorch/examples/super_resolution/data.py (not a copy): a sibling module with
get_training_set(upscale_factor) / get_test_set(upscale_factor) returning datasets of (low-resolution input,
high-resolution target) pairs. Our own synthetic images: the input is the target average-pooled by the factor."""

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset


def _pairs(count: int, upscale_factor: int, seed: int) -> TensorDataset:
    rng = torch.Generator().manual_seed(seed)
    high = torch.rand(count, 1, 8, 8, generator=rng)
    low = F.avg_pool2d(high, upscale_factor)
    return TensorDataset(low, high)


def get_training_set(upscale_factor: int) -> TensorDataset:
    return _pairs(32, upscale_factor, seed=21)


def get_test_set(upscale_factor: int) -> TensorDataset:
    return _pairs(12, upscale_factor, seed=22)
