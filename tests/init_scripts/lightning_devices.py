"""A Lightning script in the documented argparse style: Trainer(devices=..., num_nodes=..., strategy=...,
accelerator=...) from flags whose defaults suit one GPU. Under torchrun, Lightning refuses a devices count that
differs from the world size, so init must wire --devices {nproc_per_node} and --num_nodes {nnodes}."""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--max_steps", type=int, default=3)
    parser.add_argument("--accumulate_grad_batches", type=int, default=1)
    parser.add_argument("--devices", default=1)
    parser.add_argument("--num_nodes", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--accelerator", default="gpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 4), torch.randn(128, 1))
    trainer = L.Trainer(
        devices=int(args.devices), num_nodes=args.num_nodes, strategy=args.strategy, accelerator=args.accelerator,
        max_steps=args.max_steps, accumulate_grad_batches=args.accumulate_grad_batches, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Regression(args.lr), DataLoader(data, batch_size=args.batch_size))


if __name__ == "__main__":
    main()
