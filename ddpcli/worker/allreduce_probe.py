"""A short all-reduce probe: how long one DDP-style all-reduce of a model's gradients takes here, as a training step
meets it.

    python -m ddpcli.worker.allreduce_probe --world W --bytes S --backend gloo --work 0.02 --out F
    torchrun --standalone --nproc-per-node W -m ddpcli.worker.allreduce_probe --bytes S --backend nccl --out F ...

With `--world`, this process is rank 0 and forks the other ranks once torch is imported (a file:// rendezvous in
F's folder): torch is imported once, not once a rank and once more by torchrun (a 2-rank probe of 4,672 bytes:
4.6-4.9 CPU-s and 6.9-8.8 s under torchrun, 1.3 CPU-s and 2.5-4.4 s forked, on a loaded 2-core host).
CUDA may not be used by a process forked from one that has, so the nccl probe runs under torchrun, one fresh
process a rank.

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
import sys
import time
import traceback
from datetime import timedelta
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


FORKED_TIMEOUT = timedelta(seconds=60)  # a forked rank that died leaves the others in a collective: not for 30 min


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--work", type=float, default=0.0, help="CPU seconds of busy work before a busy round")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--world", type=int, default=0, help="ranks forked here (0: one rank of torchrun's job)")
    args = parser.parse_args()
    if args.world:
        sys.stdout.flush()
        os._exit(run_forked(args))  # no interpreter teardown: gloo can abort in it, after the result is written
    dist.init_process_group(args.backend)
    measure(args)


def run_forked(args: argparse.Namespace) -> int:
    """Rank 0 here and ranks 1..W-1 forked from this process; 0 when every rank ended well."""
    store = f"file://{args.out.parent / 'rendezvous'}"
    children = []
    for rank in range(1, args.world):
        pid = os.fork()
        if pid == 0:
            os._exit(_rank(args, store, rank))
        children.append(pid)
    code = _rank(args, store, 0)
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
    return 1 if code or any(statuses) else 0


def _rank(args: argparse.Namespace, store: str, rank: int) -> int:
    try:
        dist.init_process_group(
            args.backend, init_method=store, rank=rank, world_size=args.world, timeout=FORKED_TIMEOUT
        )
        measure(args)
        return 0
    except BaseException:  # a forked rank must end here, whatever happened, with its traceback on stderr
        traceback.print_exc()
        sys.stderr.flush()
        return 1


def measure(args: argparse.Namespace) -> None:
    """Time the rounds on this rank of the group; rank 0 writes the result to --out."""
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
