"""The transforms published scripts compose, on uint8 H x W (x C) images and float C x H x W tensors. The random
ones draw nothing (a crop is the centre, a flip is none): the port's concern is the data's split, not augmentation."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _chw(image: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if image.dtype == torch.uint8:
        image = image.unsqueeze(-1) if image.dim() == 2 else image
        return image.permute(2, 0, 1).to(torch.get_default_dtype()), True
    return image, False


def _back(image: torch.Tensor, was_uint8: bool) -> torch.Tensor:
    return image.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0) if was_uint8 else image


def _pair(size: Any) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


class Compose:
    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image)
        return image


class ToTensor:
    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        chw, was_uint8 = _chw(image)
        return chw / 255.0 if was_uint8 else chw


class Normalize:
    def __init__(self, mean: Any, std: Any) -> None:
        self.mean, self.std = list(mean), list(std)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return (tensor - mean) / std


class Resize:
    def __init__(self, size: Any, **_: Any) -> None:
        self.size = _pair(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        chw, was_uint8 = _chw(image)
        if tuple(chw.shape[-2:]) != self.size:
            chw = F.interpolate(chw.unsqueeze(0), size=self.size, mode="bilinear", align_corners=False)[0]
        return _back(chw, was_uint8)


RandomResizedCrop = Resize


class CenterCrop:
    def __init__(self, size: Any) -> None:
        self.size = _pair(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        chw, was_uint8 = _chw(image)
        top, left = (chw.shape[-2] - self.size[0]) // 2, (chw.shape[-1] - self.size[1]) // 2
        return _back(chw[:, top : top + self.size[0], left : left + self.size[1]], was_uint8)


class RandomCrop(CenterCrop):
    def __init__(self, size: Any, padding: Any = None, **_: Any) -> None:
        super().__init__(size)


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: Any) -> Any:
        return image


class Lambda:
    def __init__(self, function: Any) -> None:
        self.function = function

    def __call__(self, image: Any) -> Any:
        return self.function(image)


class Pad:
    """Zero padding of every side (an int) or of left/right and top/bottom (a pair), as torchvision's constant fill."""

    def __init__(self, padding: Any, fill: int = 0, **_: Any) -> None:
        self.padding, self.fill = padding, fill

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        chw, was_uint8 = _chw(image)
        pad = self.padding
        if isinstance(pad, int):
            sides = (pad, pad, pad, pad)
        else:
            sides = (pad[0], pad[1], pad[0], pad[1]) if len(pad) == 2 else tuple(pad)
        left, top, right, bottom = sides
        chw = F.pad(chw, (left, right, top, bottom), value=float(self.fill))
        return _back(chw, was_uint8)


def _functional_module() -> Any:
    """`import torchvision.transforms.functional as TF` (milesial/Pytorch-UNet's train.py imports it): a submodule
    registered in sys.modules, with the few functions a script calls."""
    import sys
    import types

    module = types.ModuleType(__name__ + ".functional")
    module.to_tensor = lambda image: ToTensor()(image)  # type: ignore[attr-defined]
    module.normalize = lambda tensor, mean, std: Normalize(mean, std)(tensor)  # type: ignore[attr-defined]
    module.resize = lambda image, size, **_: Resize(size)(image)  # type: ignore[attr-defined]
    module.hflip = lambda image: image.flip(-1)  # type: ignore[attr-defined]
    module.vflip = lambda image: image.flip(-2)  # type: ignore[attr-defined]
    sys.modules.setdefault(module.__name__, module)
    return module


functional = _functional_module()
