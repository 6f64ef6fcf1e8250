"""Ours: the project's helpers: a Logger that appends a tab-separated row per epoch, and a checkpoint writer."""

import torch


class Logger:
    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "w") as log:
            log.write("epoch\tloss\tsamples\n")

    def log(self, epoch: int, loss: float, samples: int) -> None:
        with open(self.path, "a") as log:
            log.write(f"{epoch}\t{loss:.6f}\t{samples}\n")


def save_checkpoint(state: dict, filename: str) -> None:
    torch.save(state, filename)
