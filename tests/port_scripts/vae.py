"""Reproduces the pattern of pytorch/examples/vae/main.py (not a copy): argparse at module level (--batch-size,
--epochs, --no-accel, --seed, --log-interval), everything else at module level too; a variational autoencoder with
the reparameterisation drawn by torch.randn_like; a loss summed over the batch (reduction="sum", so a port must
scale it by the world size under DDP's averaging); lr=1e-3; train(epoch)/test(epoch) functions over the global
loaders; samples written into results/ every epoch.
Our own small model and synthetic data. SGD where the published script has Adam: Adam's step hardly changes when
every gradient is halved, so only a plain SGD step shows a port that forgets the world-size factor (2 x B/2 would
end away from 1 x B)."""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description="tiny VAE")
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--no-accel", action="store_true")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--log-interval", type=int, default=10)
args = parser.parse_args()

torch.manual_seed(args.seed)
use_accel = torch.accelerator.is_available() and not args.no_accel
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")

FEATURES = 36
rng = torch.Generator().manual_seed(5)
points = torch.rand(192, FEATURES, generator=rng)
train_loader = DataLoader(TensorDataset(points[:128]), batch_size=args.batch_size, shuffle=True)
test_loader = DataLoader(TensorDataset(points[128:]), batch_size=args.batch_size)


class TinyVAE(nn.Module):
    def __init__(self, latent: int = 3) -> None:
        super().__init__()
        self.enc = nn.Linear(FEATURES, 12)
        self.mean = nn.Linear(12, latent)
        self.log_var = nn.Linear(12, latent)
        self.dec1 = nn.Linear(latent, 12)
        self.dec2 = nn.Linear(12, FEATURES)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, log_var = self.mean(h), self.log_var(h)
        z = mu + torch.randn_like(mu) * torch.exp(log_var / 2)
        return self.decode(z), mu, log_var

    def decode(self, z):
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z))))


model = TinyVAE().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)


def vae_loss(recon, x, mu, log_var):
    reconstruction = F.binary_cross_entropy(recon, x, reduction="sum")
    divergence = -0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
    return reconstruction + divergence


def train(epoch):
    model.train()
    running = 0.0
    for i, (x,) in enumerate(train_loader):
        x = x.to(device)
        optimizer.zero_grad()
        recon, mu, log_var = model(x)
        loss = vae_loss(recon, x, mu, log_var)
        loss.backward()
        running += loss.item()
        optimizer.step()
        if i % args.log_interval == 0:
            print(f"train epoch {epoch} [{i * len(x)}] loss {loss.item() / len(x):.4f}")
    print(f"epoch {epoch} average loss {running / len(train_loader.dataset):.4f}")


def test(epoch):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for (x,) in test_loader:
            x = x.to(device)
            recon, mu, log_var = model(x)
            total += vae_loss(recon, x, mu, log_var).item()
    print(f"test loss {total / len(test_loader.dataset):.4f}")


if __name__ == "__main__":
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test(epoch)
        with torch.no_grad():
            sample = model.decode(torch.randn(8, 3, device=device))
            torch.save(sample.cpu(), f"results/sample_{epoch}.pt")
