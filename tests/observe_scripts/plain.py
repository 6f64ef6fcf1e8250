"""Textbook DDP, the way people write it: no ddpcli import. A tiny MLP on seeded synthetic regression data.

    python tests/observe_scripts/plain.py --batch-size 32
    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/plain.py --batch-size 16 --grad-accum 2

One DistributedSampler over the whole dataset at every world size (seeded shuffle, set_epoch each epoch), a loss
divided by the accumulation count, no_sync on all micro-batches but the last, SGD with a linear warmup: W processes
x batch B end with the parameters of one process with batch W x B, up to float summation order.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--save", default=None, help="rank 0 saves the final state_dict here (torch.save)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.dataset_size, 8, generator=generator)
    teacher = torch.randn(8, 1, generator=generator)
    y = torch.tanh(x @ teacher) + 0.1 * torch.randn(args.dataset_size, 1, generator=generator)
    dataset = TensorDataset(x, y)
    model: nn.Module = nn.Sequential(nn.Linear(8, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    if world > 1:
        model = DistributedDataParallel(model)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: min(1.0, (done + 1) / args.warmup) if args.warmup else 1.0
    )
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        batches = iter(loader)
        while step < args.steps:
            micro = [batch for _, batch in zip(range(args.grad_accum), batches, strict=False)]
            if len(micro) < args.grad_accum:
                break  # the epoch's tail does not fill a step
            for index, (inputs, targets) in enumerate(micro):
                last = index == len(micro) - 1
                context = model.no_sync() if world > 1 and not last else contextlib.nullcontext()
                with context:
                    loss = F.mse_loss(model(inputs), targets) / args.grad_accum
                    loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step == 1:
                first_step_done = time.perf_counter()  # steady state from here: start-up left out
        epoch += 1
    if rank == 0:
        per_step = (time.perf_counter() - first_step_done) / max(step - 1, 1)
        print(f"done: {step} steps, last loss {loss.item():.5f}, seconds_per_step={per_step:.6f}")
        if args.save:
            unwrapped = model.module if isinstance(model, DistributedDataParallel) else model
            torch.save(unwrapped.state_dict(), args.save)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
