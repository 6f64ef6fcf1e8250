"""Stand-in (ours): the Solver of loader_handed_project (see data.py)."""

import torch
import torch.nn.functional as F
from torch import nn


class Solver:
    def __init__(self, data_loader: torch.utils.data.DataLoader, steps: int) -> None:
        self.data_loader = data_loader
        self.steps = steps
        self.model = nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def train(self) -> int:
        data_loader = self.data_loader
        data_iter = iter(data_loader)
        seen = 0
        for _step in range(self.steps):
            try:
                x, y = next(data_iter)
            except StopIteration:
                data_iter = iter(data_loader)
                x, y = next(data_iter)
            seen += len(x)
            self.optimizer.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
        torch.save(self.model.state_dict(), "model.pt")
        return seen
