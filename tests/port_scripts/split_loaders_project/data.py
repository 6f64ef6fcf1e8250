"""Stand-in (ours): the loaders of split_loaders_project (see train.py)."""

import torch
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset


def get_train_valid_loader(batch_size, valid_size=0.1):
    generator = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.randn(40, 4, generator=generator), torch.randn(40, 1, generator=generator))
    indices = torch.randperm(len(dataset), generator=generator).tolist()
    split = int(valid_size * len(dataset))
    train_idx, valid_idx = indices[split:], indices[:split]
    train_loader = DataLoader(dataset, batch_size=batch_size, sampler=SubsetRandomSampler(train_idx))
    valid_loader = DataLoader(dataset, batch_size=batch_size, sampler=SubsetRandomSampler(valid_idx))
    return (train_loader, valid_loader)
