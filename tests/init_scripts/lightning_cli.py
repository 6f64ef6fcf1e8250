"""The pattern of Lightning's own examples (autoencoder.py): a LightningModule and a LightningDataModule whose
__init__ arguments become `--model.*` and `--data.*` flags through LightningCLI, with `--trainer.*` and
`--seed_everything` from Lightning itself. Tiny: a linear autoencoder on random data, on the CPU."""

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 8, learning_rate: float = 0.002) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Linear(16, hidden_dim)
        self.decoder = nn.Linear(hidden_dim, 16)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = nn.functional.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class RandomDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 8, size: int = 256) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.data = TensorDataset(torch.randn(size, 16))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)


def cli_main():
    LightningCLI(LitAutoEncoder, RandomDataModule, seed_everything_default=1234)


if __name__ == "__main__":
    cli_main()
