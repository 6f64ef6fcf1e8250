"""Reproduces the pattern of pytorch/examples/mnist/main.py (not a copy): argparse inside main() with the flags
--batch-size, --test-batch-size, --epochs, --lr, --gamma, --no-accel, --dry-run, --seed, --log-interval and
--save-model; train()/evaluate() functions taking (args, model, device, loader, ...); the device picked through
torch.accelerator; shuffle only when an accelerator is used; dropout; Adadelta with a StepLR; a test loss summed
with reduction="sum"; torch.save(model.state_dict(), "mnist_cnn.pt") behind --save-model.
Our own small model and synthetic data."""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3)
        self.hidden = nn.Linear(4 * 3 * 3, 16)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = self.drop(F.relu(self.hidden(torch.flatten(x, 1))))
        return F.log_softmax(self.head(x), dim=1)


def make_sets():
    rng = torch.Generator().manual_seed(11)
    images = torch.randn(192, 1, 8, 8, generator=rng)
    labels = torch.randint(0, 5, (192,), generator=rng)
    return TensorDataset(images[:128], labels[:128]), TensorDataset(images[128:], labels[128:])


def train_one_epoch(args, model, device, loader, optimizer, epoch):
    model.train()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step % args.log_interval == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.5f}")
        if args.dry_run:
            break


def evaluate(model, device, loader):
    model.eval()
    total, right = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            total += F.nll_loss(out, y, reduction="sum").item()
            right += (out.argmax(dim=1) == y).sum().item()
    n = len(loader.dataset)
    print(f"eval: mean loss {total / n:.4f}, accuracy {right}/{n}")


def main():
    parser = argparse.ArgumentParser(description="small classifier")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--no-accel", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--save-model", action="store_true")
    args = parser.parse_args()

    accel = torch.accelerator.is_available() and not args.no_accel
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if accel else torch.device("cpu")

    train_options = {"batch_size": args.batch_size}
    test_options = {"batch_size": args.test_batch_size}
    if accel:
        train_options.update({"shuffle": True, "pin_memory": True})
        test_options.update({"pin_memory": True})
    train_set, test_set = make_sets()
    train_loader = DataLoader(train_set, **train_options)
    test_loader = DataLoader(test_set, **test_options)

    model = Classifier().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train_one_epoch(args, model, device, train_loader, optimizer, epoch)
        evaluate(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
