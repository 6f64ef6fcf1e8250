"""A short all-reduce probe, run by torchrun: how long one DDP-style all-reduce of a model's gradients takes here,
as a training step meets it.

    torchrun --standalone --nproc-per-node W -m ddpcli.worker.allreduce_probe --bytes S --backend gloo \
        --work 0.02 --out F

The gradients (S bytes of float32) are cut into DDP's buckets (a 1 MiB first bucket, then 25 MiB ones), all
all-reduced asynchronously and waited for, as the reducer does. In a DDP step the ranks do not come to the
all-reduce idle and together: each arrives after its forward and backward, at its own time, and the all-reduce can
only finish after the last one arrived. So the probe runs pairs of rounds, interleaved so that a change of the
host's load falls on both: an idle round (barrier, all-reduce) and a busy round (barrier, then each rank spins
until it has used `--work` seconds of CPU, as its compute would, then all-reduces). A round's time is measured from
the last rank's arrival to each rank's end (time.perf_counter: CLOCK_MONOTONIC, one clock for every process of
the host), the mean over ranks; the wait for the last rank is not in it (the cost model adds it on its own,
ddpcli.prediction.comm). A few warm-up pairs, then ROUNDS timed ones; rank 0 writes the mean busy
round's seconds as `seconds` (the idle one's when `--work` is 0), `idle_seconds`, `busy_seconds`, `work_s` and
every round to F as JSON. The mean, not the median: a step's mean is what samples/s divides by, and on a shared
host the busy rounds are two-humped (here at load 4.7, 20 ms of work: half near 2 ms, half 9 to 24 ms; median 7.2,
mean 8.6, idle 1.5 ms), where the median of 15 jumps between the humps. The previous measurement (load 3.7): a
median of 4.5 ms a busy round of 20 ms against 2.6 ms idle.
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

from ddpcli.prediction.predict import ddp_bucket_sizes

WARMUP, ROUNDS = 3, 15


def spin(work_s: float) -> None:
    """Burn `work_s` seconds of this process's CPU time (its compute before the all-reduce)."""
    start = time.process_time()
    while time.process_time() - start < work_s:
        sum(range(200))


def one_round(buckets: list[torch.Tensor], work_s: float, device: torch.device) -> float:
    """Seconds from the last rank's arrival at the all-reduce to its end, the mean over ranks."""
    dist.barrier()
    if work_s > 0:
        spin(work_s)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    arrived = time.perf_counter()
    for work in [dist.all_reduce(bucket, async_op=True) for bucket in buckets]:
        work.wait()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    ended = time.perf_counter()
    mine = torch.tensor([arrived, ended], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    times = torch.stack(everyone).cpu()
    last = float(times[:, 0].max())
    return max(float(times[:, 1].mean()) - last, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--work", type=float, default=0.0, help="CPU seconds of busy work before a busy round")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    buckets = [torch.ones(max(size // 4, 1), device=device) for size in ddp_bucket_sizes(args.bytes)]
    idle, busy = [], []
    for index in range(WARMUP + ROUNDS):
        pair = one_round(buckets, 0.0, device), one_round(buckets, args.work, device) if args.work > 0 else None
        if index >= WARMUP:
            idle.append(pair[0])
            if pair[1] is not None:
                busy.append(pair[1])
    if dist.get_rank() == 0:
        result = {
            "seconds": statistics.mean(busy or idle),
            "idle_seconds": statistics.mean(idle),
            "busy_seconds": statistics.mean(busy) if busy else None,
            "work_s": args.work,
            "timed_from": "last_arrival",
            "idle_rounds": idle,
            "busy_rounds": busy,
        }
        args.out.write_text(json.dumps(result, allow_nan=False))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
