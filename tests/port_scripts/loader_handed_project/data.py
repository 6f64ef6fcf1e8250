"""Stand-in (ours) for a published pattern (yunjey/stargan): data_loader.py's get_loader builds and returns the
DataLoader; main.py calls it and hands the loader to the Solver of solver.py, which keeps it as an attribute and
draws its batches by hand in train(), `next(data_iter)`, starting a new pass when the iterator ends."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loader(batch_size: int) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
    return DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True)
