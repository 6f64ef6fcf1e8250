"""Stand-in (ours) for a published pattern (Bjarten/early-stopping-pytorch's MNIST notebook: the training set's
indices shuffled with np.random.shuffle, never seeded, and split into training and validation SubsetRandomSamplers;
synthetic data drawn unseeded too). Each run draws its own split; under torchrun every rank must draw the same one,
or the ranks' shards overlap and miss samples."""

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

data = TensorDataset(torch.arange(80.0).unsqueeze(1), torch.randn(80, 1))
indices = list(range(80))
np.random.shuffle(indices)
train_loader = DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(indices[16:]))
valid_loader = DataLoader(data, batch_size=8, sampler=SubsetRandomSampler(indices[:16]))
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
seen = []
for x, y in train_loader:
    seen += x.flatten().int().tolist()
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
with torch.no_grad():
    valid = sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in valid_loader) / 16
print(f"trained on {len(seen)} samples, {len(set(seen))} distinct; valid loss {valid:.4f}")
