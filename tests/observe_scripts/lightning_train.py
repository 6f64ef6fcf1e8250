"""PyTorch Lightning, as its docs write it: no ddpcli import. A tiny LightningModule on synthetic regression data.

    python tests/observe_scripts/lightning_train.py --batch-size 16
    torchrun --standalone --nproc-per-node 2 tests/observe_scripts/lightning_train.py --batch-size 8 --grad-accum 2

--validate adds a validation loop (a loader of batch 32) every 2 training batches and keeps Lightning's default
sanity check (2 validation batches before training, which leave the DDP wrapper in eval mode).

Under torchrun Lightning joins the process group torchrun describes (strategy "ddp", devices = processes per node),
adds the DistributedSampler itself and skips the gradient all-reduce of accumulating micro-batches.
"""

from __future__ import annotations

import argparse
import os

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(self(inputs), targets)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(self(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validate", action="store_true")
    args = parser.parse_args()
    L.seed_everything(args.seed, verbose=False)
    generator = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.dataset_size, 8, generator=generator)
    y = torch.tanh(x @ torch.randn(8, 1, generator=generator))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=processes,
        num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // processes,
        strategy="ddp" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "auto",
        max_steps=args.steps,
        accumulate_grad_batches=args.grad_accum,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **({"val_check_interval": 2, "check_val_every_n_epoch": None} if args.validate else {"limit_val_batches": 0}),
    )
    validation = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=32) if args.validate else None
    trainer.fit(Regressor(args.lr), loader, validation)


if __name__ == "__main__":
    main()
