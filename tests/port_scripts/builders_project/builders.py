"""Stand-in (ours): the builders of builders_project (see train.py)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_model(cfg):
    return nn.Sequential(nn.Linear(4, cfg["hidden"]), nn.ReLU(), nn.Linear(cfg["hidden"], 1))


def build_optimizer(cfg, model):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"])


def build_loaders(cfg):
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
    return {"train": DataLoader(data, batch_size=cfg["batch"], shuffle=True), "val": DataLoader(data, batch_size=16)}
