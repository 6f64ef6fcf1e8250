"""What the observer reads from torch objects without changing them: the tensors of a batch, a DataLoader's sampler
and epoch, the run's wish to measure the noise scale; and `wrap`, the one way it puts itself around a function."""

import functools
import json
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler


def wrap(owner: Any, name: str, *, before: Callable[..., Any] | None = None, after: Callable[..., Any] | None = None):
    """Replace owner.name by a function that calls `before(*args)` and/or `after(result, *args)` around it."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(result, *args, **kwargs)
        return result

    setattr(owner, name, wrapper)


def first_tensor(value: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in nested args/kwargs (a batch `(x, y)`, Lightning's `(batch, index)`, HF's `input_ids=`)."""
    if isinstance(value, torch.Tensor):
        return value
    if depth > 4:
        return None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    for item in items:
        found = first_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


def tensors(value: Any, limit: int = 8, depth: int = 0) -> list[torch.Tensor]:
    """The first `limit` tensors in nested args/kwargs: all of a batch's inputs, not only the first (which may be an
    attention mask, the same on every rank)."""
    if isinstance(value, torch.Tensor):
        return [value]
    found: list[torch.Tensor] = []
    if depth > 4:
        return found
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    for item in items:
        found += tensors(item, limit - len(found), depth + 1)
        if len(found) >= limit:
            break
    return found[:limit]


def fingerprint(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Three numbers that differ between different batches and agree between copies of one (stays on device)."""
    device = tensors[0].device
    values = torch.cat([tensor.detach().reshape(-1).to(device, torch.float64) for tensor in tensors])
    return torch.stack([values.sum(), values.square().sum(), values[:1].sum()])


def snapshot(value: Any) -> Any:
    """A tensor lr is updated in place by the scheduler before the stream reads it: keep this step's value."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def loader_info(loader: DataLoader) -> dict[str, Any]:
    """What feeds the batches. A DataLoader given a batch_sampler keeps a placeholder SequentialSampler in .sampler
    (accelerate's loaders at one process): then the batch sampler's own sampler is the one that counts."""
    sampler = type(loader.sampler).__name__
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    if batch_sampler is not None and type(batch_sampler).__name__ != "BatchSampler":
        sampler = f"{type(batch_sampler).__name__}({type(inner).__name__})" if inner is not None else sampler
    elif inner is not None and inner is not loader.sampler:
        sampler = type(inner).__name__
    distributed = isinstance(loader.sampler, DistributedSampler) or isinstance(inner, DistributedSampler)
    return {
        "sampler": sampler,
        "distributed_sampler": distributed,
        "batch_size": loader.batch_size,
        "iterations": 0,
        "epochs": [],
        "training": False,
    }


def sampler_epoch(loader: DataLoader) -> int | None:
    for sampler in (loader.sampler, getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        epoch = getattr(sampler, "epoch", None)
        if isinstance(epoch, int):
            return epoch
    return None


def wants_noise_scale() -> bool:

    try:
        return bool(json.loads(os.environ.get("DDPCLI_RUN", "{}")).get("noise_scale", False))
    except ValueError:
        return False
