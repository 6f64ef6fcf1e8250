"""Several rules in one flat, seeded script (no parser, hard-coded batch): a GAN-like pair of models each with its
optimizer, a summed loss, gradient accumulation, hand-sliced batches and a checkpoint read back."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
batch_size = 8
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.randn(128, 4, dtype=torch.float64)
y = x @ torch.randn(4, 1, dtype=torch.float64)
loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)

model = nn.Linear(4, 1).double().to(device)
critic = nn.Linear(1, 1).double().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
critic_optimizer = torch.optim.SGD(critic.parameters(), lr=0.01)
accumulate = 2

for epoch in range(2):
    for i, (xb, yb) in enumerate(loader):
        loss = F.mse_loss(model(xb.to(device)), yb.to(device), reduction="sum") / accumulate
        loss.backward()
        if (i + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
    for i in range(0, len(x), batch_size):
        critic_optimizer.zero_grad()
        out = critic(y[i : i + batch_size].to(device))
        F.mse_loss(out, y[i : i + batch_size].to(device)).backward()
        critic_optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.6f}")

torch.save({"model": model.state_dict(), "critic": critic.state_dict()}, "mixed.pt")
state = torch.load("mixed.pt")
model.load_state_dict(state["model"])
