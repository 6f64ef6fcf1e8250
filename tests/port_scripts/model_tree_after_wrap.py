"""Stand-in (ours) for a published pattern (weiaicunzai/pytorch-cifar100's train.py): every step logs the gradient
norm of each parameter of the model's last child, `list(net.children())[-1]`; the model's graph is written to
TensorBoard with `writer.add_graph(net, input_tensor)` (a trace of its forward) before training, and the script
traces it itself too; it also counts its BatchNorm layers through `net.modules()`, re-initializes its Linear layers
with `net.apply(...)` and switches `net.eval()` / `net.train()`, reading the flag of the model itself."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)


def reinit(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.constant_(module.bias, 0.01)


net.apply(reinit)
writer = SummaryWriter(log_dir="runs")
writer.add_graph(net.eval(), torch.zeros(2, 4))
traced = torch.jit.trace(net, torch.zeros(2, 4))
net.train()
print("graph", len(list(traced.graph.nodes())) > 0)
print("batchnorms", sum(isinstance(m, nn.BatchNorm1d) for m in net.modules()))
print("children", [type(m).__name__ for m in net.children()])
for epoch in range(2):
    norms = []
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()
        last = list(net.children())[-1]
        norms.append(sorted(name for name, _ in last.named_parameters()))
    net.eval()
    print("epoch", epoch, "eval mode", net.training, net[0].training, "last layer's", norms[-1])
    net.train()
