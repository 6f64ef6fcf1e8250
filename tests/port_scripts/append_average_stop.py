"""Stand-in (ours) for a published pattern (Bjarten/early-stopping-pytorch's MNIST notebook: create_datasets()
returns the training, validation and test loaders as a tuple; each epoch's losses are appended to a list, averaged
with np.average and handed to an EarlyStopping object whose `early_stop` ends the loop). Here the stop watches the
training loss (the rank's own share under torchrun), so every rank must take rank 0's decision; the validation
loader stays whole."""

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.best, self.counter, self.early_stop = patience, None, 0, False

    def __call__(self, loss):
        if self.best is None or loss < self.best - 1e-3:
            self.best, self.counter = loss, 0
        else:
            self.counter += 1
            self.early_stop = self.counter >= self.patience


def create_datasets(batch_size):
    generator = torch.Generator().manual_seed(1)
    train = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator))
    valid = TensorDataset(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator))
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(valid, batch_size=batch_size)


torch.manual_seed(0)
train_loader, valid_loader = create_datasets(8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
stopper = EarlyStopping(patience=2)
for epoch in range(40):
    train_losses = []
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        train_losses.append(loss.item())
    with torch.no_grad():
        valid_losses = [F.mse_loss(model(x), y).item() for x, y in valid_loader]
    stopper(np.average(train_losses))
    if stopper.early_stop:
        print(f"stopped after epoch {epoch}; valid {np.average(valid_losses):.4f} over {len(valid_losses)} batches")
        break
