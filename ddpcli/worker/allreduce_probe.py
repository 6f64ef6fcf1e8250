"""A short all-reduce probe, run by torchrun: how long one DDP-style all-reduce of a model's gradients takes here.

    torchrun --standalone --nproc-per-node W -m ddpcli.worker.allreduce_probe --bytes S --backend gloo --out F

The gradients (S bytes of float32) are cut into DDP's buckets (a 1 MiB first bucket, then 25 MiB ones), all
all-reduced asynchronously and waited for, as the reducer does. A few warm-up rounds, then ROUNDS timed ones, each
after a barrier; rank 0 writes the median round's seconds (and every round's) to F as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ddpcli.experiment.predict import ddp_bucket_sizes

WARMUP, ROUNDS = 3, 15


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    buckets = [torch.ones(max(size // 4, 1), device=device) for size in ddp_bucket_sizes(args.bytes)]
    rounds = []
    for index in range(WARMUP + ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        for work in [dist.all_reduce(bucket, async_op=True) for bucket in buckets]:
            work.wait()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= WARMUP:
            rounds.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps({"seconds": statistics.median(rounds), "rounds": rounds}, allow_nan=False))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
