"""Stand-in (ours) for a published pattern (a batch whose loss is not finite is skipped before its backward, as
forum answers and many training loops have it: `if not torch.isfinite(loss): continue`): one sample of the data set
holds a nan, so the batch that draws it is skipped. Under torchrun only the rank whose share holds it sees the nan."""

import argparse

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
generator = torch.Generator().manual_seed(4)
inputs, targets = torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator)
targets[5] = float("nan")
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=args.batch_size,
                                     shuffle=True)  # fmt: skip
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
skipped = trained = 0
for epoch in range(3):  # noqa: B007 (as scripts write it)
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        if not torch.isfinite(loss):
            skipped += 1
            continue
        loss.backward()
        optimizer.step()
        trained += 1
print(f"skipped {skipped}, trained {trained}, finite {all(p.isfinite().all() for p in model.parameters())}")
