"""The samples a plan holds, on its own arithmetic: what a run is measured against. Pure.

`total_steps x global_batch_size` is the plan's samples only when every step is full. An epoch plan whose shard is
no multiple of the batch ends each epoch in a partial last batch (drop_last = false), or drops it (drop_last =
true, with the DistributedSampler's shard already cut to a multiple of the world size); the sampler pads a dataset
that is no multiple of the world size (planning's samples_per_rank holds that). Fabric's image_classifier at 480
samples x 2 epochs, 2 processes of 32: 16 steps, 960 samples, not 16 x 64 = 1024.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpcli.jsonvalues import whole_or_none


@dataclass(frozen=True)
class PlannedSamples:
    samples: int
    words: str  # how the plan comes to them, for a message


def planned_samples(plan: dict[str, Any]) -> PlannedSamples | None:
    """The samples over every process that the plan's steps hold; None when the plan does not say."""
    steps, batch = whole_or_none(plan.get("total_steps")), whole_or_none(plan.get("global_batch_size"))
    shard = whole_or_none(plan.get("samples_per_rank"))
    per_device, accum = whole_or_none(plan.get("per_device_batch_size")), whole_or_none(plan.get("grad_accum_steps"))
    world = whole_or_none(plan.get("world_size"))
    if not steps or steps < 0:
        return None
    if shard and per_device and accum and world and shard > 0 and per_device > 0 and accum > 0 and world > 0:
        epoch = _epoch_steps(shard, per_device, accum, plan.get("drop_last") is True)
        if epoch:
            whole, rest = divmod(steps, len(epoch))
            per_rank = whole * sum(epoch) + sum(epoch[:rest])
            total = per_rank * world
            if batch is None or total != steps * batch:
                size, epochs = whole_or_none(plan.get("dataset_size")), whole_or_none(plan.get("epochs"))
                how = f"{epochs} epoch{'s' if epochs != 1 else ''} of {size} samples" if size and epochs else (
                    f"{steps} steps over epochs of {size} samples" if size else f"{steps} steps"
                )  # fmt: skip
                return PlannedSamples(total, f"{total} ({how}, {shard} per process an epoch)")
            return PlannedSamples(total, f"{steps} x {batch} = {total}")
    if batch:
        return PlannedSamples(steps * batch, f"{steps} x {batch} = {steps * batch}")
    return None


def _epoch_steps(shard: int, per_device: int, accum: int, drop_last: bool) -> list[int]:
    """One process's samples in each optimizer step of an epoch (planning.py's steps_per_epoch, step by step)."""
    full, partial = divmod(shard, per_device)
    micro = [per_device] * full + ([partial] if partial and not drop_last else [])
    if drop_last:
        micro = micro[: len(micro) // accum * accum]
    return [sum(micro[start : start + accum]) for start in range(0, len(micro), accum)]
