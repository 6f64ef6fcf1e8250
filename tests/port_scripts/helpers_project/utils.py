"""Ours: the checkpoint helpers of Aladdin Persson's Machine-Learning-Collection (utils.py): the model's and the
optimizer's state_dict saved under fixed keys, loaded back into the objects the caller passes."""

import torch


def save_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, filename: str) -> None:
    torch.save({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}, filename)


def load_checkpoint(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint["state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer"])
