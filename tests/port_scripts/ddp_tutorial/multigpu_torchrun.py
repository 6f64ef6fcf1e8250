"""Reproduces the pattern of pytorch/examples/distributed/ddp-tutorial-series/multigpu_torchrun.py (not a copy): a
script that is already data-parallel and meant for torchrun: init_process_group from the environment, LOCAL_RANK as
the device, a Trainer class holding the model wrapped in DistributedDataParallel, a DataLoader with a
DistributedSampler and set_epoch, snapshots saved by rank 0, destroy_process_group at the end; argparse with
positional total_epochs and save_every and --batch_size. Our own code; `ddpcli port` must refuse it."""

import argparse
import os

import torch
import torch.nn.functional as F
from datautils import RandomPairs
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def setup() -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    init_process_group(backend=backend)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


class Trainer:
    def __init__(self, model, loader, optimizer, save_every: int) -> None:
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.device = torch.device(f"cuda:{self.local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        self.model = DDP(model.to(self.device))
        self.loader = loader
        self.optimizer = optimizer
        self.save_every = save_every

    def _epoch(self, epoch: int) -> None:
        self.loader.sampler.set_epoch(epoch)
        for x, y in self.loader:
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()

    def train(self, total_epochs: int) -> None:
        for epoch in range(total_epochs):
            self._epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                torch.save(self.model.module.state_dict(), "snapshot.pt")


def main(save_every: int, total_epochs: int, batch_size: int) -> None:
    setup()
    dataset = RandomPairs(256)
    model = torch.nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer, save_every).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="already distributed training")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", default=32, type=int)
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size)
