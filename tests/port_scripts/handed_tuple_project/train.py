"""Stand-in (ours) for a common shape of single-GPU projects (a trainer class that unpacks a tuple of loaders
into `self.train_loader, self.val_loader`, seen in public trainers): lib/data.py returns both loaders built in
the return itself (no names), the script hands the call's value whole to lib/trainer.py's Trainer, which trains on
one, validates on the other, logs through a Logger that opens its file in __init__, and saves the model's
state_dict with an attribute of the model read after the wrap (`self.model.width`)."""

import argparse
import os

import torch
from lib.data import make_loaders
from lib.model import Net
from lib.trainer import Trainer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    model = Net(16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    trainer = Trainer(model, optimizer, make_loaders(args.batch_size), args.out)
    trainer.fit(args.epochs)


if __name__ == "__main__":
    main()
