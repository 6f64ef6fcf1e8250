"""Ours: bearpaw/pytorch-classification's cifar.py pattern: the model put in nn.DataParallel unconditionally (so
its checkpoints hold `module.` keys), `--resume PATH` loading `state_dict` and `optimizer` back into the
DataParallel model after it is built, and `save_checkpoint(state, filename)` of the whole state every epoch."""

import argparse

import torch
from torch import nn


def save_checkpoint(state: dict, filename: str) -> None:
    torch.save(state, filename)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--resume", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 6), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 1))
    model = torch.nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch = 0
    if args.resume:
        checkpoint = torch.load(args.resume)
        start_epoch = checkpoint["epoch"]
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    for epoch in range(start_epoch, start_epoch + args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        save_checkpoint(
            {"epoch": epoch + 1, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()},
            "checkpoint.pth.tar",
        )
    print("keys", sorted(model.state_dict()))


if __name__ == "__main__":
    main()
