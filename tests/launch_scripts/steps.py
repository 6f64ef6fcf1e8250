"""A minimal DDP job that does not use ddpcli.runtime: the launcher must work with any torchrun script.

    steps.py STEPS [--crash-rank R --crash-step S] [--sleep SECONDS]

Rank 0 appends one metrics row per step to $DDPCLI_RUN_DIR/metrics.jsonl; every step all-reduces a tensor so
all ranks move in lockstep. A crash raises on one rank; --sleep makes each step slow (for timeouts, Ctrl-C).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-step", type=int, default=-1)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run = json.loads(os.environ["DDPCLI_RUN"])
    metrics = open(os.path.join(os.environ["DDPCLI_RUN_DIR"], "metrics.jsonl"), "a") if rank == 0 else None  # noqa: SIM115
    start = time.monotonic()
    for step in range(1, args.steps + 1):
        if rank == args.crash_rank and step == args.crash_step:
            raise RuntimeError(f"deliberate crash on rank {rank} at step {step}")
        value = torch.tensor([float(rank)])
        dist.all_reduce(value)
        time.sleep(args.sleep)
        if metrics:
            row = {
                "step": step,
                "samples": step * run["global_batch_size"],
                "time": time.monotonic() - start,
                "loss": 1.0 / step,
                "lr": run["lr"],
            }
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
