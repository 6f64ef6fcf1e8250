"""Ours: a learning-rate schedule written as a loop around the batch loop, one pass over the data per rate (the
pattern of fast.ai-style "fit one rate, then the next" notebooks turned into scripts): the outer loop's variable is
a float, not an epoch count. Prints the samples each pass trained on."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1), torch.arange(16))
loader = DataLoader(data, batch_size=4, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for lr in (0.1, 0.05, 0.01):
    for group in optimizer.param_groups:
        group["lr"] = lr
    seen = []
    for x, y, index in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        seen += index.tolist()
    print(f"lr {lr}: {seen}")
torch.save(model.state_dict(), "model.pt")
