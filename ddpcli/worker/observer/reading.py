"""What the observer reads from torch objects without changing them: the tensors of a batch, a DataLoader's sampler
and epoch, the run's wish to measure the noise scale; and `wrap`, the one way it puts itself around a function."""

import functools
import json
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from ddpcli.worker.observer.attribution import skip_in_warnings
from ddpcli.worker.observer.samplers import chain_names, distributed, sampler_chain


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

    skip_in_warnings(wrapper)  # a warning the original raises for its caller names the caller, not this wrapper
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
    """What feeds the batches: the sampler that decides the order (the innermost of the chain of wrappers, see
    samplers.py) and the chain itself, outermost first."""
    chain = sampler_chain(loader)
    names = chain_names(chain)
    return {
        "sampler": names[-1] if names else type(loader.sampler).__name__,
        "sampler_chain": names,
        "distributed_sampler": distributed(chain),
        "batch_size": loader.batch_size,
        "iterations": 0,
        "epochs": [],
        "training": False,
    }


def sampler_epoch(loader: DataLoader) -> int | None:
    for sampler in sampler_chain(loader):
        epoch = getattr(sampler, "epoch", None)
        if isinstance(epoch, int):
            return epoch
    return None


def initial_lrs(optimizer: torch.optim.Optimizer) -> list[float | None]:
    """Each param group's base lr where a scheduler recorded it (`initial_lr`: torch's and timm's schedulers set it
    when they are built), else None (then the peak lr is the base)."""
    values = [group.get("initial_lr") for group in optimizer.param_groups]
    return [float(value) if isinstance(value, int | float | torch.Tensor) else None for value in values]


def wants_noise_scale() -> bool:

    try:
        return bool(json.loads(os.environ.get("DDPCLI_RUN", "{}")).get("noise_scale", False))
    except ValueError:
        return False
