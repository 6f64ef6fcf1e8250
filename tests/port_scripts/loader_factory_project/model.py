"""Stand-in (ours): the project's model class keeps the loader it was handed by data.py as an attribute and trains
itself over it (a GAN class's train(): the loop, the optimizer and the step are the class's)."""

import torch
import torch.nn.functional as F
from data import make_loader
from torch import nn


class Regression:
    def __init__(self, batch_size: int) -> None:
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.data_loader = make_loader(batch_size)

    def train(self, epochs: int) -> int:
        seen = 0
        for _ in range(epochs):
            for x, y in self.data_loader:
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.net(x), y)
                loss.backward()
                self.optimizer.step()
                seen += len(x)
        return seen
