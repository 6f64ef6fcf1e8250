"""Stand-in (ours) for a published pattern: the model computes its own loss in a method of its class
(`model.compute_loss(batch)`, a `training_step` called by a hand-written loop), which the training code calls on the
model instead of its forward."""

import torch
import torch.nn.functional as F
from torch import nn


class Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.body(x), y)

    def compute_loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Calls the model's own forward, as a training_step does: `self(x)`."""
        x, y = batch
        return F.mse_loss(self(x), y) + 0.01 * self.body[0].weight.pow(2).sum()
