"""FSDP as its tutorial writes it, on CPU and gloo; no ddpcli import. Every rank holds a shard of the parameters,
so comparing the ranks' parameters says nothing about data parallelism.

    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/fsdp_train.py --api fsdp1|fsdp2

--global-data: every rank draws the same global batch (--batch-size x world size rows, one seed) and trains on its
slice, so N processes of batch B see the samples one process of batch N x B does (an equivalence pair).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=("fsdp1", "fsdp2"), default="fsdp2")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--global-data", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    if args.api == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        model: nn.Module = FullyShardedDataParallel(net, device_id=torch.device("cpu"))
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(net)
        model = net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rank, world, batch = dist.get_rank(), dist.get_world_size(), args.batch_size
    data = torch.Generator().manual_seed(0 if args.global_data else rank)
    for _ in range(args.steps):
        x = (
            torch.randn(batch * world, 4, generator=data)[rank * batch : (rank + 1) * batch]
            if args.global_data
            else (torch.randn(batch, 4, generator=data))
        )
        F.mse_loss(model(x), x.sum(dim=1, keepdim=True)).backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
