"""Stand-in (ours): the script of configure_optimizers_project (see model.py)."""

import argparse

import torch
import torch.nn.functional as F
from model import GPT

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
generator = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
model = GPT()
optimizer = model.configure_optimizers({"lr": 0.01})
seen = 0
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        seen += len(x)
    print(f"epoch {epoch}: {seen} samples")
torch.save(model.state_dict(), "model.pt")
