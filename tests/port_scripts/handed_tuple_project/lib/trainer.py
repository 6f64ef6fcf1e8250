"""Stand-in (ours): the Trainer of handed_tuple_project (see train.py)."""

import os

import torch
import torch.nn.functional as F


class Logger:
    def __init__(self, path):
        self.file = open(path, "a")  # noqa: SIM115 (kept open for the run, as loggers do)

    def log(self, **row):
        self.file.write(" ".join(f"{key}={value}" for key, value in row.items()) + "\n")
        self.file.flush()


class Trainer:
    def __init__(self, model, optimizer, loaders, out_dir):
        self.model = model
        self.optimizer = optimizer
        self.train_loader, self.val_loader = loaders
        self.out_dir = out_dir
        self.logger = Logger(os.path.join(out_dir, "log.txt"))

    def train_epoch(self):
        self.model.train()
        seen = 0
        for x, y in self.train_loader:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            seen += len(x)
        return seen

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        total = sum(F.mse_loss(self.model(x), y, reduction="sum").item() for x, y in self.val_loader)
        return total / len(self.val_loader.dataset)

    def save(self, name):
        state = {"model": self.model.state_dict(), "width": self.model.width}
        torch.save(state, os.path.join(self.out_dir, name))

    def fit(self, epochs):
        for epoch in range(epochs):
            seen = self.train_epoch()
            val_loss = self.validate()
            self.logger.log(epoch=epoch, val=f"{val_loss:.6f}")
            print(f"epoch {epoch}: trained on {seen}, val {val_loss:.6f}")
            self.save("last.pt")
