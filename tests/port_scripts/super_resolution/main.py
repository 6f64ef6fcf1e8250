"""Reproduces the pattern of pytorch/examples/super_resolution/main.py (not a copy): argparse at module level
(--upscale_factor, --batchSize, --testBatchSize, --nEpochs, --lr, --accel, --threads, --seed); sibling-module
imports (`from model import Net`, `from data import ...`); DataLoaders built with num_workers=--threads; train(epoch)
and test() functions, the test reporting a PSNR from an MSE; checkpoint(epoch) saving the WHOLE module with
torch.save(model, path) every epoch (1-based: model_epoch_1.pth ...).
Our own small model and synthetic data."""

import argparse
import math

import torch
from data import get_test_set, get_training_set
from model import Net
from torch import nn
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser(description="tiny super resolution")
parser.add_argument("--upscale_factor", type=int, required=True)
parser.add_argument("--batchSize", type=int, default=16)
parser.add_argument("--testBatchSize", type=int, default=8)
parser.add_argument("--nEpochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--accel", action="store_true")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seed", type=int, default=123)
opt = parser.parse_args()

torch.manual_seed(opt.seed)
device = torch.accelerator.current_accelerator() if opt.accel else torch.device("cpu")

training_data_loader = DataLoader(
    get_training_set(opt.upscale_factor), num_workers=opt.threads, batch_size=opt.batchSize, shuffle=True
)
testing_data_loader = DataLoader(get_test_set(opt.upscale_factor), num_workers=opt.threads,
                                 batch_size=opt.testBatchSize)  # fmt: skip

model = Net(upscale_factor=opt.upscale_factor).to(device)
criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr)


def train(epoch):
    total = 0.0
    for low, high in training_data_loader:
        low, high = low.to(device), high.to(device)
        optimizer.zero_grad()
        loss = criterion(model(low), high)
        total += loss.item()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: mean loss {total / len(training_data_loader):.5f}")


def test():
    psnr = 0.0
    with torch.no_grad():
        for low, high in testing_data_loader:
            mse = criterion(model(low.to(device)), high.to(device))
            psnr += 10 * math.log10(1 / mse.item())
    print(f"mean PSNR {psnr / len(testing_data_loader):.3f} dB")


def checkpoint(epoch):
    path = f"model_epoch_{epoch}.pth"
    torch.save(model, path)
    print(f"saved {path}")


for epoch in range(1, opt.nEpochs + 1):
    train(epoch)
    test()
    checkpoint(epoch)
