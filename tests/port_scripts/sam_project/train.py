"""Stand-in (ours) for a published pattern (davda54/sam: example/train.py and sam.py): an optimizer class of the
project's own, on torch.optim.Optimizer, that steps in two calls, each after its own forward and backward of the
same batch (`first_step` moves the parameters to the sharpest point near them, `second_step` moves them back and
steps the base optimizer); the script never calls `optimizer.step()`. Its data is a class of data.py keeping the
training and test loaders as attributes (sam's data/cifar.py), iterated as `dataset.batches`."""

import argparse

import torch
import torch.nn.functional as F
from data import Data
from sam import SAM

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
dataset = Data(args.batch_size)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
optimizer = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9)
for epoch in range(args.epochs):
    for x, y in dataset.batches:
        F.mse_loss(model(x.double()), y.double()).backward()
        optimizer.first_step(zero_grad=True)
        F.mse_loss(model(x.double()), y.double()).backward()
        optimizer.second_step(zero_grad=True)
    with torch.no_grad():
        test = sum(F.mse_loss(model(x.double()), y.double(), reduction="sum").item() for x, y in dataset.train_check)
    print(f"epoch {epoch}: test loss {test / len(dataset.train_check.dataset):.6f}")
torch.save(model.state_dict(), "model.pt")
