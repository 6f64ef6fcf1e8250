"""A plain DDP script with the classic reasons a run is slow, one flag each (no ddpcli import).

    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/slow_knobs.py --batch-size 32 [knobs]

Knobs: --slow-getitem S (every sample's __getitem__ sleeps S seconds: input-bound), --sleepy-rank R --sleep S
(rank R's model sleeps S seconds in every forward: a straggler), --crowded-rank R (rank R shares its one CPU with
a busy-looping process of a higher priority for every step: a straggler whose host, not its work, is the
cause), --grad-accum N with --sync-every-micro-batch (no `no_sync`: an all-reduce per micro-batch) or without it
(no_sync on all but the last), --find-unused (DDP's find_unused_parameters=True on a model that uses every
parameter), --embedding-rows N (a dense nn.Embedding of N x 64 in front of the MLP: every step all-reduces its
whole gradient, which backward only fills with zeros and one row: communication-bound). An MLP big enough that its
compute, not the all-reduce, dominates a clean run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Samples(Dataset):
    def __init__(self, size: int, delay: float) -> None:
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(size, 64, generator=generator)
        self.y = torch.randn(size, 1, generator=generator)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x[index], self.y[index]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole batch at once (the DataLoader's batched fetch): no per-sample Python cost in a clean run."""
        if self.delay:
            time.sleep(self.delay * len(indices))
        return self.x[indices], self.y[indices]


class Embedded(nn.Module):
    """Adds row 0 of a dense embedding table to every input: a cheap forward and backward (a gradient of zeros but
    one row) whose gradient the all-reduce carries whole, as with a large table of a recommender or a vocabulary."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.table = nn.Embedding(rows, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table(torch.zeros(len(x), dtype=torch.long))


class Sleepy(nn.Module):
    """Sleeps in forward on one rank: that rank computes slower than the others."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.seconds:
            time.sleep(self.seconds)
        return x


HOG = """
import ctypes, os, signal
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the rank that started it
while True:
    pass
"""


def crowd_this_process() -> subprocess.Popen[bytes]:
    """Pin this process to one of its CPUs and start a busy loop on the same CPU at a higher priority (this process
    niced by 5: about a quarter of the CPU when both are runnable), so that the other load of a shared test machine
    cannot hide it: the rest of the host's work moves to the other CPUs."""
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    hog = subprocess.Popen([sys.executable, "-c", HOG])  # inherits the one-CPU affinity, not the niceness below
    os.nice(5)
    return hog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--slow-getitem", type=float, default=0.0)
    parser.add_argument("--sleepy-rank", type=int, default=-1)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--crowded-rank", type=int, default=-1)
    parser.add_argument("--sync-every-micro-batch", action="store_true")
    parser.add_argument("--find-unused", action="store_true")
    parser.add_argument("--embedding-rows", type=int, default=0)
    args = parser.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    sleep = args.sleep if rank == args.sleepy_rank else 0.0
    embedded = [Embedded(args.embedding_rows)] if args.embedding_rows else []
    model: nn.Module = nn.Sequential(
        *embedded, nn.Linear(64, args.hidden), nn.ReLU(), Sleepy(sleep), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 1),
    )  # fmt: skip
    if world > 1:
        model = DistributedDataParallel(model, find_unused_parameters=args.find_unused)
    dataset = Samples(args.batch_size * args.grad_accum * world * (args.steps + 1), args.slow_getitem)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, collate_fn=lambda batch: batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Crowded from the first step on: the start-up before it (torch's imports at the optimizer) is no step's time.
    hog = crowd_this_process() if rank == args.crowded_rank else None
    batches, step = iter(loader), 0
    while step < args.steps:
        for index in range(args.grad_accum):
            inputs, targets = next(batches)
            last = index == args.grad_accum - 1
            skip_sync = world > 1 and not last and not args.sync_every_micro_batch
            with model.no_sync() if skip_sync else contextlib.nullcontext():
                loss = F.mse_loss(model(inputs), targets) / args.grad_accum
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
    if hog is not None:
        hog.kill()
        hog.wait()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
