"""Ours: the project's training step, kept apart from the script (engine.py's train_one_epoch pattern)."""

import torch
from torch import nn


class Engine:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def train_one_epoch(self, loader: torch.utils.data.DataLoader) -> tuple[float, list[int]]:
        self.model.train()
        total, seen = 0.0, []
        for x, y, index in loader:
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            seen += index.tolist()
        print(f"trained on {len(seen)} samples")
        return total, seen
