"""The PyTorch quickstart tutorial's style (module-level `batch_size = 64`, `learning_rate = 1e-3`, `epochs`),
made data-parallel the textbook way: a process group from torchrun, DDP, a DistributedSampler. Synthetic data."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

learning_rate = 1e-3
batch_size = 64
epochs = 2

dist.init_process_group("gloo")
torch.manual_seed(0)
training_data = TensorDataset(torch.randn(256, 28 * 28), torch.randint(0, 10, (256,)))
sampler = DistributedSampler(training_data, shuffle=True, seed=0)
train_dataloader = DataLoader(training_data, batch_size=batch_size, sampler=sampler)
model = DistributedDataParallel(nn.Sequential(nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 10)))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)


def train_loop(dataloader, model, loss_fn, optimizer):
    model.train()
    for X, y in dataloader:
        loss = loss_fn(model(X), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


for t in range(epochs):
    sampler.set_epoch(t)
    train_loop(train_dataloader, model, loss_fn, optimizer)
dist.barrier()
dist.destroy_process_group()
