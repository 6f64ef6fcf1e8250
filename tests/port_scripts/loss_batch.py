"""Stand-in (ours) for a published pattern (pytorch/tutorials' "What is torch.nn really?", nn_tutorial.py: one
`loss_batch(model, loss_func, xb, yb, opt=None)` for training and validation, which back-propagates and steps only
when given an optimizer; `fit` calls it with the optimizer over the training loader and without one, under
no_grad, over the validation loader, and prints the validation loss weighted by each batch's size). Only the
training loader is training data: sharded, the validation loader would give rank 0 half the validation set."""

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()


def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)
    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), len(xb)


def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            loss_batch(model, loss_func, xb, yb, opt)
        model.eval()
        with torch.no_grad():
            losses, nums = zip(*[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl], strict=True)
        val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)
        print(f"epoch {epoch}: validation loss {val_loss:.6f} over {np.sum(nums)} samples")


torch.manual_seed(0)
x = torch.randn(96, 4)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
train_dl = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=args.batch_size)
valid_dl = DataLoader(TensorDataset(x[64:], y[64:]), batch_size=args.batch_size * 2)
model = torch.nn.Linear(4, 1)
fit(2, model, F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.05), train_dl, valid_dl)
torch.save(model.state_dict(), "model.pt")
