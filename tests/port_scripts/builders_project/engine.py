"""Stand-in (ours): the training epoch and the evaluation of builders_project (see train.py)."""

import torch
import torch.nn.functional as F


def train_one_epoch(model, data_loader, optimizer, epoch):
    model.train()
    seen = 0
    for inputs, targets in data_loader:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        seen += len(inputs)
    return seen


def evaluate(model, data_loader):
    with torch.no_grad():
        total = sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in data_loader)
    return total / len(data_loader.dataset)
