"""A plain DDP loop with an lr schedule, written two ways people write it: no ddpcli import.

    python tests/observe_scripts/schedule_loop.py --batch-size 16 --steps 8
    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/schedule_loop.py --batch-size 8 --grad-accum 2 \
        --step-on-modulo

The schedule is a cosine over the optimizer steps that starts one step in, as timm's per-epoch cosine does: its
peak is below the base lr the optimizer was given (`--lr`), and torch's scheduler records that base lr in each
param group (`initial_lr`). `--step-on-modulo` steps the optimizer when `index % accumulation == 0`, counting
micro-batches from 0 (transformers' run_glue_no_trainer.py counts this way): the first optimizer step is made of
one micro-batch, the others of `--grad-accum`. DDP is built with `broadcast_buffers=False`, which torch deprecates
with a FutureWarning raised for this file's line.
"""

from __future__ import annotations

import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--step-on-modulo", action="store_true")
    args = parser.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.dataset_size, 8, generator=generator)
    y = torch.tanh(x @ torch.randn(8, 1, generator=generator))
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model: nn.Module = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    if world > 1:
        model = DistributedDataParallel(model, broadcast_buffers=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: 0.5 * (1 + math.cos(math.pi * (done + 1) / (args.steps + 1)))
    )
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for index, (inputs, targets) in enumerate(loader):
            loss = F.mse_loss(model(inputs), targets) / args.grad_accum
            loss.backward()
            last = index % args.grad_accum == 0 if args.step_on_modulo else (index + 1) % args.grad_accum == 0
            if last:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                step += 1
                if step == args.steps:
                    break
        epoch += 1
    if rank == 0:
        print(f"done: {step} steps, last lr {scheduler.get_last_lr()[0]:.4g}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
