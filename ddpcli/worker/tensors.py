"""Two tensor chores that the runtime helper and the observer share: one way to write a tensor file, one way to
take a gradient's squared norm."""

import os
from pathlib import Path
from typing import Any

import torch


def save_atomic(state: dict[str, Any], path: Path) -> None:
    """torch.save beside the target, then rename: a reader (compare, a resume) never loads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(state, temp)
    os.replace(temp, path)


def squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """|t|^2 as one fp32 dot product: the cheapest form, and it runs for every gradient bucket of every step."""
    flat = tensor.reshape(-1)
    flat = flat if flat.dtype == torch.float32 else flat.float()
    return torch.dot(flat, flat)
