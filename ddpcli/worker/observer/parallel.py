"""Whether the ranks trained one model: a digest of this rank's parameters, compared across ranks by the merge.

A multi-process run is data-parallel only if the processes average their gradients (a DDP wrapper, or the script's
own `dist.all_reduce` on the gradients): then every rank holds the very same parameters after each step. Rather than
guess from the wrapper's class, each rank records a digest of the parameters its optimizer updates, before the first
optimizer step (the initial parameters), after it, and at the end; ddpcli.rundir.parallel compares the ranks.

The digest costs a few kernels per tensor, three times a run, and no collective: per tensor its sum (in float64,
without a float64 copy), SAMPLES evenly strided elements and the integer sum of its raw bits (`bits`: equal on ranks
that hold the same tensor even when it is all NaN, which no float comparison says), stacked on the device and read
at the next flush.
Sharded parameters (FSDP, DTensor, DeepSpeed ZeRO-3) are not digested: each rank holds a different shard, so the
comparison does not apply (and reading a DTensor may start a collective).
"""

from collections.abc import Iterable
from typing import Any

import torch

SAMPLES = 8
_SHARDING_WRAPPERS = ("FullyShardedDataParallel", "FSDPModule", "DeepSpeedEngine")
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # an integer view of each element's bits


def optimizer_params(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor]:
    return [param for optimizer in optimizers for group in optimizer.param_groups for param in group["params"]]


def sharding(params: list[torch.Tensor], modules: Iterable[Any] = ()) -> str | None:
    """What shards the parameters across ranks, if anything does (then ranks are meant to differ)."""
    for module in modules:
        for cls in type(module).__mro__:
            if cls.__name__ in _SHARDING_WRAPPERS:
                return cls.__name__
    for param in params:
        if type(param).__name__ == "DTensor" or hasattr(param, "to_local"):
            return "DTensor (FSDP2 / tensor parallel)"
        if hasattr(param, "ds_id"):
            return "DeepSpeed ZeRO-3"
        if type(param).__name__ == "FlatParameter" or getattr(param, "_is_flat_param", False):
            return "FullyShardedDataParallel"
    return None


def digest(params: list[torch.Tensor], at: str) -> dict[str, Any]:
    """The row `{"kind": "params", "at": at, "sums": [...], "samples": [...], "numel": N}`; values stay on the
    device (tensors) until the stream flushes them."""
    live = [param for param in params if param.numel() > 0]
    row: dict[str, Any] = {"kind": "params", "at": at, "tensors": len(live), "numel": sum(p.numel() for p in live)}
    if not live:
        return row
    device = live[0].device
    with torch.no_grad():
        sums, samples, bits = [], [], []
        for param in live:
            flat = param.detach().reshape(-1)
            stride = max(1, flat.numel() // SAMPLES)
            sums.append(flat.sum(dtype=torch.float64).to(device))
            samples.append(flat[::stride][:SAMPLES].to(device, torch.float64))
            integer = _BITS.get(flat.element_size()) if flat.is_floating_point() else None
            if integer is not None and bits is not None:
                bits.append(flat.view(integer).sum(dtype=torch.int64).to(device))  # wraps around: still exact
            else:
                bits = None
        row["sums"] = torch.stack(sums)
        row["samples"] = torch.cat(samples)
        if bits:
            row["bits"] = torch.stack(bits)
    return row


def params_row(optimizers: list[torch.optim.Optimizer], modules: Iterable[Any], at: str) -> dict[str, Any]:
    """This rank's parameters at `at` ("initial", "first_step", "end"): a digest, or what shards them."""
    params = optimizer_params(optimizers)
    shards = sharding(params, modules)
    return {"kind": "params", "at": at, "sharded": shards} if shards else digest(params, at)
