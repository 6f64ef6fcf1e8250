"""The pattern of the PyTorch DDP tutorial's multigpu_torchrun.py (not its code): two required positionals
(total_epochs, save_every), --batch_size, an lr hard-coded in the SGD call, and a snapshot.pt in the working
directory that every start resumes from. Under ddpcli each run must get its own working directory."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(total_epochs: int, save_every: int, batch_size: int, snapshot_path: str = "snapshot.pt") -> None:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data))
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    epochs_run = 0
    if os.path.exists(snapshot_path):
        snapshot = torch.load(snapshot_path)
        model.module.load_state_dict(snapshot["MODEL_STATE"])
        epochs_run = snapshot["EPOCHS_RUN"]
    print("received " + json.dumps({"rank": rank, "world_size": world, "batch_size": batch_size,
                                    "epochs_run": epochs_run, "cwd": os.getcwd()}), flush=True)  # fmt: skip
    for epoch in range(epochs_run, total_epochs):
        loader.sampler.set_epoch(epoch)
        for source, targets in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(source), targets).backward()
            optimizer.step()
        if rank == 0 and (epoch + 1) % save_every == 0:
            torch.save({"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, snapshot_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)")
    args = parser.parse_args()
    main(args.total_epochs, args.save_every, args.batch_size)
