"""The PyTorch distributed tutorial's data parallelism (pytorch/tutorials intermediate_source/dist_tuto.rst): the
dataset partitioned by rank, `bsz = 128 // size` (the global batch kept at 128), gradients averaged by hand with
all_reduce, SGD(lr=0.01, momentum=0.5). Its `__main__` starts `mp.Process` workers itself; this one joins the
process group torchrun gives it instead, and its data is synthetic."""

from random import Random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import TensorDataset


class Partition:
    def __init__(self, data, index):
        self.data, self.index = data, index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        return self.data[self.index[index]]


class DataPartitioner:
    def __init__(self, data, sizes, seed=1234):
        self.data, self.partitions = data, []
        rng = Random()
        rng.seed(seed)
        indexes = list(range(len(data)))
        rng.shuffle(indexes)
        for frac in sizes:
            part_len = int(frac * len(data))
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


def partition_dataset():
    generator = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(512, 8, generator=generator), torch.randint(0, 4, (512,), generator=generator))
    size = dist.get_world_size()
    bsz = 128 // size
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes).use(dist.get_rank())
    train_set = torch.utils.data.DataLoader(partition, batch_size=bsz, shuffle=True)
    return train_set, bsz


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run(rank, size):
    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    print(f"Rank {rank}: batch {bsz}", flush=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    for epoch in range(2):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        print(f"Rank {rank}, epoch {epoch}: {epoch_loss / len(train_set):.4f}", flush=True)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    run(dist.get_rank(), dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()
