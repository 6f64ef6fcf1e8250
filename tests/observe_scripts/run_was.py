"""What a multi-process run was, in the patterns published scripts have (issue 26); no ddpcli import.

    torchrun --standalone --nproc-per-node N tests/observe_scripts/run_was.py --mode MODE

--mode copies    a process group, no wrapper, a shared seed and the same data on every rank: transformers' Trainer on
                 CPU without --use_cpu, accelerate without --cpu. The ranks end equal, yet never averaged anything
--mode no-group  no init_process_group, a shared seed and the same data (pytorch/examples mnist under torchrun)
--mode ddp       DistributedDataParallel, each rank its own data (--lr 1e30 diverges: loss inf, then NaN)
--mode hand      the dist_tuto pattern: no wrapper, `dist.all_reduce(param.grad.data)` / world size after backward
--mode save      no process group; at the end `torch.save(model, f)` of the whole module, `copy.deepcopy(model)`
                 and its state_dict, as word_language_model does (--save PATH)
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

MODES = ("copies", "no-group", "ddp", "hand", "save")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=MODES, default="ddp")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save", default=None)
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if args.mode in ("copies", "ddp", "hand") and world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(42)  # the same seed on every rank (set_seed(42), mnist's --seed 1)
    model: nn.Module = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    if args.mode == "ddp" and world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    shared = args.mode in ("copies", "no-group", "save")
    data = torch.Generator().manual_seed(7 if shared else 100 + rank)  # the same batches everywhere, or a shard
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 4, generator=data)
        loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        if args.mode == "hand" and world > 1:
            for param in model.parameters():
                dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
                param.grad.data /= float(world)
        optimizer.step()
        optimizer.zero_grad()
    if args.save is not None:
        path = args.save if rank == 0 else f"{args.save}.{rank}"  # every process saves, each to its own file
        torch.save(model, path)  # the whole module, pickled
        twin = copy.deepcopy(model)
        assert all(
            torch.equal(a, b) for a, b in zip(twin.state_dict().values(), model.state_dict().values(), strict=True)
        )
        torch.save(twin.state_dict(), path + ".state")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
