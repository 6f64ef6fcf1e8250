"""Lightning Fabric's image classifier (Lightning-AI/pytorch-lightning examples/fabric/image_classifier/
train_fabric.py), tiny and synthetic: argparse, `Fabric()` with no arguments (the example expects `fabric run` to
give accelerator, strategy and devices), `optim.Adadelta`, setup / setup_dataloaders / fabric.backward, StepLR."""

import argparse

import torch
import torch.nn.functional as F
import torch.optim as optim
from lightning.fabric import Fabric, seed_everything
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def run(hparams):
    fabric = Fabric()
    seed_everything(hparams.seed)
    generator = torch.Generator().manual_seed(0)
    train_dataset = TensorDataset(torch.randn(256, 16, generator=generator), torch.randint(0, 4, (256,)))
    train_loader = DataLoader(train_dataset, batch_size=hparams.batch_size)
    train_loader = fabric.setup_dataloaders(train_loader)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = optim.Adadelta(model.parameters(), lr=hparams.lr)
    model, optimizer = fabric.setup(model, optimizer)
    scheduler = StepLR(optimizer, step_size=1, gamma=hparams.gamma)
    for epoch in range(1, hparams.epochs + 1):
        model.train()
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            fabric.backward(loss)
            optimizer.step()
        scheduler.step()
        fabric.print(f"epoch {epoch} world {fabric.world_size} loss {loss.item():.4f}")
    fabric.barrier()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Fabric MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size for training (default: 64)")
    parser.add_argument("--epochs", type=int, default=2, help="number of epochs to train")
    parser.add_argument("--lr", type=float, default=1.0, help="learning rate (default: 1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, help="Learning rate step gamma (default: 0.7)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    run(parser.parse_args())
