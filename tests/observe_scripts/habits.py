"""Habits of published training scripts that make a run differ from its plan; no ddpcli import.

    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/habits.py --habit HABIT ...

--habit divide-accum  nanoGPT: the accumulation given is the total over all processes, divided by the world size
--habit snapshot      the DDP tutorial: resume from ./snapshot.pt when it exists (left in the shared working
                      directory by an earlier run), save it after every step
--habit unseeded      the model's initialisation is not seeded (the data is)
--habit scale-loss    transformers' Trainer: the model returns {"loss": ...} and the loss back-propagated is that
                      times the world size (DDP's average then gives the mean over every process's samples)
--habit one-class-loss  the DDP tutorial's toy: cross_entropy of a one-unit output against float targets, which is
                      0 whatever the model does
A DDP-wrapped MLP, a mean-reduced loss, SGD; every rank draws its own seeded samples.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

SNAPSHOT = Path("snapshot.pt")


class WithLoss(nn.Module):
    """A model that computes its own loss, as Hugging Face models do when given labels."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": F.mse_loss(self.net(x), x.sum(dim=1, keepdim=True))}


def main() -> None:
    parser = argparse.ArgumentParser()
    habits = ("none", "divide-accum", "snapshot", "unseeded", "scale-loss", "one-class-loss")
    parser.add_argument("--habit", choices=habits, default="none")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    accumulation = args.grad_accum
    if args.habit == "divide-accum":
        assert accumulation % world == 0
        accumulation //= world
    if args.habit != "unseeded":
        torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    start = 0
    if args.habit == "snapshot" and SNAPSHOT.exists():
        snapshot = torch.load(SNAPSHOT, weights_only=True)
        net.load_state_dict(snapshot["model"])
        start = snapshot["step"]
    wrapped: nn.Module = WithLoss(net) if args.habit == "scale-loss" else net
    model = DistributedDataParallel(wrapped) if world > 1 else wrapped
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(start, args.steps):
        for index in range(accumulation):
            x = torch.randn(args.batch_size, 4, generator=data)
            last = index == accumulation - 1
            with model.no_sync() if world > 1 and not last else contextlib.nullcontext():
                if args.habit == "scale-loss":
                    loss = model(x)["loss"] * world
                elif args.habit == "one-class-loss":
                    loss = F.cross_entropy(model(x), torch.rand(args.batch_size, 1, generator=data))
                else:
                    loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
                (loss / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad()
        if args.habit == "snapshot" and rank == 0:
            torch.save({"model": net.state_dict(), "step": step + 1}, SNAPSHOT)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
