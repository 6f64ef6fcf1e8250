"""What the cost model needs of a planned run: the type every prediction module shares.

It lives below them (predict, comm, contention import it; it imports none of them), so the modules
that take a Target never import predict back, not even for type checking. Pure: no torch, no pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """What the cost model needs of a planned run."""

    world_size: int
    nproc_per_node: int
    per_device_batch_size: int
    grad_accum_steps: int
    threads: int | None  # OMP_NUM_THREADS of its env, else None (torchrun: 1 when nproc > 1)
