"""Stand-in (ours): a script that stops early on its training loss through pytorchtools.py's EarlyStopping (see
there); under torchrun each rank's loss is its own share's, so each rank's stopper decides on its own. After the
loop, the best weights the stopper saved are read back (the notebook's "load the last checkpoint with the best
model"): a file another module writes, on rank 0 alone once ported."""

import argparse

import torch
import torch.nn.functional as F
from pytorchtools import EarlyStopping

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(args.seed)
generator = torch.Generator().manual_seed(args.seed)
data = torch.utils.data.TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
stopper = EarlyStopping(patience=1)
for epoch in range(30):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    stopper(total / len(loader), model)
    if stopper.early_stop:
        print("stopped at epoch", epoch)
        break
model.load_state_dict(torch.load("checkpoint.pt"))
with torch.no_grad():
    print(f"best checkpoint: loss {F.mse_loss(model(data.tensors[0]), data.tensors[1]).item():.4f}")
