"""One small training loop in the ways a multi-process run can (fail to) be data-parallel; no ddpcli import.

    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/parallel_modes.py --mode MODE

--mode ddp        the model wrapped in DistributedDataParallel (data-parallel)
--mode allreduce  no wrapper: the script averages the gradients itself with dist.all_reduce (data-parallel)
--mode unwrapped  a process group, but the model is never wrapped and gradients never averaged (imagenet main.py
                  on CPU, transformers under torchrun on CPU): each rank trains its own model
--mode no-group   init_process_group is never called: every process thinks it is alone
Every rank draws different samples (a DistributedSampler-like slice by RANK), so unsynchronised ranks drift apart.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ddp", "allreduce", "unwrapped", "no-group"), default="ddp")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if args.mode != "no-group" and world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    if args.mode == "ddp" and world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 4, generator=data)
        loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        if args.mode == "allreduce" and world > 1:
            for param in model.parameters():
                dist.all_reduce(param.grad)
                param.grad /= world
        optimizer.step()
        optimizer.zero_grad()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
