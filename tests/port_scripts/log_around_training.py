"""Ours: the training loop inside `with open("log.csv", "w") as log:` (a CSV of each epoch's loss, as small Kaggle
and course scripts write it), and the number of steps bound inside a print by an assignment expression."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=4, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
print(f"{(steps := len(loader))} steps an epoch")
with open("log.csv", "w") as log:
    log.write("epoch,steps\n")
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        log.write(f"{epoch},{steps}\n")
torch.save(model.state_dict(), "model.pt")
