"""Stand-in (ours) for a published pattern (meliketoy/wide-resnet.pytorch's main.py): the model is a global of the
script, built at the top level and put in nn.DataParallel when CUDA is there; `train(epoch)` reads it without a
`global`, sets `net.training = True` and builds a new SGD over `net.parameters()` every epoch (its learning rate
from the epoch); the top-level loop calls it, and the model is saved at the end."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
if torch.cuda.is_available():
    net.cuda()
    net = torch.nn.DataParallel(net, device_ids=range(torch.cuda.device_count()))


def learning_rate(epoch: int) -> float:
    return 0.1 * (0.5**epoch)


def train(epoch: int) -> None:
    net.train()
    net.training = True
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate(epoch), momentum=0.9)
    seen = 0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(inputs), targets)
        loss.backward()
        optimizer.step()
        seen += len(inputs)
    print("epoch", epoch, "samples", seen)


for epoch in range(2):
    train(epoch)
torch.save(net.state_dict(), "net.pt")
