"""Stand-in (ours) for a published pattern (HobbitLong/RepDistiller's train_student.py: the student and a regressor
on its features kept in two nn.ModuleLists, `module_list` (what the loop calls: `module_list[0](x)`, and the
teacher appended after) and `trainable_list` (what the optimizer steps: `SGD(trainable_list.parameters())`);
neither list is ever called). A DDP wrap of the list the optimizer takes averages nothing: DDP averages in the
backward of its own forward, and the loop calls the modules inside the list, not the wrapper."""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(64, 4)
loader = DataLoader(TensorDataset(x, x @ torch.randn(4, 2)), batch_size=args.batch_size)
student = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
regressor = nn.Linear(2, 2)
teacher = nn.Linear(4, 2)
module_list = nn.ModuleList([])
module_list.append(student)
module_list.append(regressor)
trainable_list = nn.ModuleList([])
trainable_list.append(student)
trainable_list.append(regressor)
optimizer = torch.optim.SGD(trainable_list.parameters(), lr=0.05)
module_list.append(teacher)


def train(epoch, loader, module_list, optimizer):
    for inputs, targets in loader:
        out = module_list[0](inputs)
        with torch.no_grad():
            hint = module_list[2](inputs)
        loss = F.mse_loss(out, targets) + F.mse_loss(module_list[1](out), hint)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


for epoch in range(2):
    print(f"epoch {epoch}: loss {train(epoch, loader, module_list, optimizer):.6f}")
torch.save(student.state_dict(), "student.pt")
