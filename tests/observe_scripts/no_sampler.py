"""A plain DDP script that forgot the DistributedSampler: every rank trains on the same shuffled batches.

torchrun --standalone --nproc-per-node 2 tests/observe_scripts/no_sampler.py --batch-size 8
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)  # same seed on every rank: the same shuffle everywhere
    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    model: nn.Module = nn.Linear(8, 1)
    if world > 1:
        model = DistributedDataParallel(model)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step, (inputs, targets) in enumerate(loader):
        if step == args.steps:
            break
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
