"""Counts host synchronisations and collectives while a DDP model trains, for tests/test_observer_costs.py.

    DDPCLI_RUN_DIR=/tmp/x python -m ddpcli.worker.observer tests/scripts/observer_sync_probe.py --steps 6

Runs a 1-process gloo group (DDP and its comm hooks work as at any size), with the observer's stream told never to
flush on its own, counts every Python-level call of a collective in torch.distributed and of a Tensor method that
copies to the host (item, tolist, cpu, numpy, float/int/bool conversion) during the steps, then flushes the
stream and counts again. Prints {"training": counts, "after_flush": counts} as JSON. Launched with
DDPCLI_OBSERVE=0 it gives the same script's counts without the observer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from ddpcli.worker import stream as stream_module

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "reduce", "gather", "scatter",
    "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "monitored_barrier",
)  # fmt: skip
HOST_COPIES = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")

counts: Counter[str] = Counter()


def count_calls(owner: Any, name: str, key: str) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--grad-accum", type=int, default=2)
    args = parser.parse_args()
    stream_module.FLUSH_S = stream_module.FLUSH_ROWS = 10**9  # only the explicit flush below
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group("gloo", init_method=f"file://{store}/store", rank=0, world_size=1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    batches = iter(DataLoader(data, batch_size=8))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for name in COLLECTIVES:
        if hasattr(dist, name):
            count_calls(dist, name, name)
    for name in HOST_COPIES:
        count_calls(torch.Tensor, name, name)
    for _ in range(args.steps):
        for index in range(args.grad_accum):
            x, y = next(batches)
            last = index == args.grad_accum - 1
            with contextlib.nullcontext() if last else model.no_sync():
                (F.mse_loss(model(x), y) / args.grad_accum).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    training = dict(counts)
    stream = stream_module.rank_stream()
    if stream is not None:
        stream.flush()
    print(json.dumps({"training": training, "after_flush": dict(counts), "pid": os.getpid()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
