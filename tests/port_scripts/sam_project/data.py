"""Stand-in (ours): the data of sam_project (see train.py), a class keeping its loaders as attributes."""

import torch
from torch.utils.data import DataLoader, TensorDataset


class Data:
    def __init__(self, batch_size):
        generator = torch.Generator().manual_seed(1)
        train = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator))
        test = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
        self.batches = DataLoader(train, batch_size=batch_size)
        self.train_check = DataLoader(test, batch_size=batch_size)  # held out, whatever its name says
