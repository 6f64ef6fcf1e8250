"""make_grid and save_image: a grid as one tensor, and a small file of the image's shape (never torch.save)."""

from __future__ import annotations

import os
from typing import Any

import torch


def make_grid(tensor: Any, nrow: int = 8, padding: int = 2, **_: Any) -> torch.Tensor:
    images = (
        list(tensor)
        if isinstance(tensor, (list, tuple))
        else list(tensor.unsqueeze(0) if tensor.dim() == 3 else tensor)
    )
    return torch.cat(images, dim=-1)


def save_image(tensor: Any, fp: Any, **_: Any) -> None:
    shape = tuple(make_grid(tensor).shape)
    if isinstance(fp, (str, os.PathLike)):
        with open(fp, "w", encoding="utf-8") as handle:
            handle.write(f"image {shape}\n")
    else:
        fp.write(f"image {shape}\n".encode())
