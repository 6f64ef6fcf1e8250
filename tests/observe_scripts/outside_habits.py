"""What scripts do outside their training loop that ddpcli must name (issue 27, items 6 and 7); no ddpcli import.

    python tests/observe_scripts/outside_habits.py --pattern PATTERN [--out DIR]

One process, a tiny MLP, 4 optimizer steps of batch 8 from a DataLoader, after what the pattern does:
  mp-process   dist_tuto's `__main__`: starts 2 `multiprocessing.Process` workers (spawn) that train, joins them
  mp-hang      the same, but the workers wait (as dist_tuto's do on port 29500 under torchrun) until killed
  pool         a `multiprocessing.Pool(2)` maps a function, then trains
  subprocess   runs `python -c pass` with subprocess.run, then trains
  workers      trains from a DataLoader with 1 worker process and runs `ls`: no process of the script's own
  same-file    trains, then torch.save(state_dict, OUT/model.pt) and open(OUT/log.txt, "w") on every rank
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(workers: int = 0) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    for x, y in DataLoader(data, batch_size=8, num_workers=workers):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


def worker(index: int) -> None:
    train()


def waiting(index: int) -> None:
    time.sleep(120)


def square(value: int) -> int:
    return value * value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pattern", required=True)
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    if args.pattern in ("mp-process", "mp-hang"):
        processes = [context.Process(target=worker if args.pattern == "mp-process" else waiting, args=(index,))
                     for index in range(2)]  # fmt: skip
        for process in processes:
            process.start()
        for process in processes:
            process.join()
    elif args.pattern == "pool":
        with context.Pool(2) as pool:
            assert pool.map(square, [1, 2]) == [1, 4]
    elif args.pattern == "subprocess":
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    elif args.pattern == "workers":
        subprocess.run(["ls", "/"], check=True, capture_output=True)
    model = train(workers=1 if args.pattern == "workers" else 0)
    if args.pattern == "same-file":
        torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
        with open(os.path.join(args.out, "log.txt"), "w") as log:
            log.write("done\n")


if __name__ == "__main__":
    main()
