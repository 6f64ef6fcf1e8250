"""A script that takes a --batch-size flag and ignores it: the DataLoader's batch is hard-coded to 8.

python tests/observe_scripts/hardcoded_batch.py --batch-size 32
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

HARDCODED_BATCH = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=32, help="ignored (the bug this script has)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    model: nn.Module = nn.Linear(8, 1)
    if world > 1:
        model = DistributedDataParallel(model)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=HARDCODED_BATCH, sampler=sampler)
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
