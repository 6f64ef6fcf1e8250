"""Stand-in (ours) for a published pattern (sthalles/SimCLR: run.py, simclr.py and utils.py; and a project's
engine.py handed the writer): the script builds the model and the optimizer and hands them to trainer.py's
Trainer by keyword, which keeps them from `**kwargs`, builds a SummaryWriter with its default, dated log_dir and
writes its config and its checkpoint into that folder through utils.py; engine.py's train_epoch steps through an
AMP GradScaler (disabled here) and logs each step's loss to the writer it is handed."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer import Trainer

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
generator = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
trainer = Trainer(model=model, optimizer=optimizer, epochs=args.epochs)
print("samples", trainer.train(loader))
