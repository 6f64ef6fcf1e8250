"""Stand-in (ours) for a published pattern (a script written for wandb sweeps: its hyperparameters are read back
from `wandb.config` after `wandb.init(config=defaults)`, which a sweep's agent overrides): every rank reads the
config, rank 0 alone logs."""

import argparse

import torch
import torch.nn.functional as F
import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

wandb.init(project="stand-in", config={"lr": 0.05, "epochs": 2, "batch_size": args.batch_size})
config = wandb.config
torch.manual_seed(0)
generator = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
loader = torch.utils.data.DataLoader(data, batch_size=config.batch_size, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
seen = 0
for epoch in range(config.epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        wandb.log({"loss": loss.item(), "epoch": epoch})
        seen += len(x)
print("samples", seen)
wandb.finish()
