"""Stand-in (ours): the Trainer of writer_handed_project (see train.py)."""

import os

import torch
from engine import train_epoch
from torch.utils.tensorboard import SummaryWriter
from utils import save_checkpoint, save_config


class Trainer:
    def __init__(self, *args, **kwargs):
        self.model = kwargs["model"]
        self.optimizer = kwargs["optimizer"]
        self.epochs = kwargs.get("epochs", 1)
        self.writer = SummaryWriter()

    def train(self, loader):
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        save_config(self.writer.log_dir, {"epochs": self.epochs})
        seen = 0
        for epoch in range(self.epochs):
            seen += train_epoch(self.model, loader, self.optimizer, scaler, self.writer, epoch)
        save_checkpoint({"state_dict": self.model.state_dict()}, os.path.join(self.writer.log_dir, "checkpoint.pt"))
        self.writer.close()
        return seen
