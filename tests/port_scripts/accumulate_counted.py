"""Ours: gradient accumulation whose micro-batch counter moves after the backward and before the test that steps
(`loss.backward(); micro += 1; if micro % accum == 0: optimizer.step()`), the order of many hand-written loops
(Kaggle notebooks, the accumulation tutorials that count with `step += 1`)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=4)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
accum, micro = 2, 0
for _epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y) / accum
        loss.backward()
        micro += 1
        if micro % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
torch.save(model.state_dict(), "model.pt")
print("micro-batches", micro)
