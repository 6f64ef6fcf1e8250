"""Ours: a single-device project whose training step, logger and checkpoint helper live in modules of its own, the
layout of many published repositories (an `engine.py` with `train_one_epoch`, as in detectron-style and
torchvision-reference projects; a `utils.py` with a Logger appending rows to log.txt and `save_checkpoint`, as in
CycleGAN- and segmentation-style repositories). The script builds the model, optimizer and loaders and calls in."""

import argparse

import torch
from engine import Engine
from torch import nn
from utils import Logger, save_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 1), torch.arange(64))
    train_loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    engine = Engine(model, optimizer)
    logger = Logger("log.txt")
    for epoch in range(args.epochs):
        loss, seen = engine.train_one_epoch(train_loader)
        logger.log(epoch, loss, len(seen))
        save_checkpoint({"model": model.state_dict(), "epoch": epoch}, f"checkpoint_{epoch}.pt")
    print("done", args.epochs)


if __name__ == "__main__":
    main()
