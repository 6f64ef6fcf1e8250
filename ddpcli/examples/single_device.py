"""A plain single-device training script, the kind people have before they have DDP: `ddpcli port` turns it into
a data-parallel one (see the README's "From one GPU to DDP in one command").

    python -m ddpcli.examples.single_device                 # one device
    ddpcli port single_device.py                            # writes single_device_ddp.py

An MLP learns a fixed random teacher from synthetic, seeded data (no download, a few seconds on a CPU): a training
loop over a shuffled DataLoader, a test loop over held-out data, the model saved with torch.save.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(size, seed):
    """x ~ N(0, I), y = a random tanh teacher of x plus a little noise, fixed by the seed."""
    generator = torch.Generator().manual_seed(seed + 1_000_003)
    teacher = torch.randn(16, 1, generator=generator) / 4
    x = torch.randn(size, 16, generator=generator)
    y = torch.tanh(x @ teacher) + 0.05 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def train(model, device, loader, optimizer, epoch):
    model.train()
    for batch, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if batch % 8 == 0:
            print(f"epoch {epoch} batch {batch}: loss {loss.item():.5f}")


def test(model, device, loader):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += F.mse_loss(model(x), y, reduction="sum").item()
            count += len(x)
    print(f"test loss {total / count:.5f}")


def main():
    parser = argparse.ArgumentParser(description="Train an MLP on synthetic data, on one device.")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--save", default="single_device.pt", help="where the trained model's state_dict goes")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(make_data(args.dataset_size, args.seed), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(make_data(128, args.seed + 1), batch_size=64)

    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        train(model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
    torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
