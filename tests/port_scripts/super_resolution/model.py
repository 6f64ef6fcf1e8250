"""Reproduces the pattern of pytorch/examples/super_resolution/model.py (not a copy): a sibling module holding the
network class that main.py imports (`from model import Net`), convolutions ending in a pixel shuffle by the upscale
factor. Our own small model."""

from torch import nn


class Net(nn.Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, upscale_factor**2, 3, padding=1),
        )
        self.shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        return self.shuffle(self.body(x))
