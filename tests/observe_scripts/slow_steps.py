"""A plain DDP training loop whose steps are slow (a sleep each): long enough to kill its launcher mid-run.

slow_steps.py --steps N --batch-size B --lr LR --sleep SECONDS
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--sleep", type=float, default=0.05)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        inputs = torch.randn(args.batch_size, 4, generator=generator)
        loss = model(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
