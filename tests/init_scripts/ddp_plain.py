"""A plain torch DDP script (no ddpcli.runtime): argparse, gloo, DistributedSampler, a tiny linear model on
synthetic data. It reads its batch size, lr and steps from flags, prints what it received on every rank, and
writes nothing else: what `ddpcli init` then `ddpcli launch` must run as planned.

    torchrun --nproc-per-node 2 ddp_plain.py --batch-size 8 --lr 0.05 --steps 4
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description="tiny DDP regression")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per process per step")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data order")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    received = {"rank": rank, "world_size": world_size, "per_device_batch_size": args.batch_size,
                "lr": args.lr, "steps": args.steps}  # fmt: skip
    print("received " + json.dumps(received), flush=True)
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            print(f"step {step} batch {len(x)} loss {loss.item():.4f}", flush=True)
            if step == args.steps:
                break
        epoch += 1
    dist.barrier()
    dist.destroy_process_group()
    print(f"done on rank {rank} of {world_size} (pid {os.getpid()})", flush=True)


if __name__ == "__main__":
    main()
