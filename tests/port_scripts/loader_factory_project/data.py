"""Stand-in (ours) for a published pattern (znxlwm/pytorch-generative-model-collections' dataloader.py): the
project's DataLoader is built in a function of its own module and returned."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader(batch_size: int) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
    return DataLoader(data, batch_size=batch_size, shuffle=True)
