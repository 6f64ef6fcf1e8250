"""Stand-in (ours): a data set of dict samples for package_loader_project (see train.py)."""

import torch
from torch.utils.data import Dataset


class Shapes(Dataset):
    NUM_CLASSES = 3

    def __init__(self, size, seed):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 4, generator=generator)
        self.labels = torch.randint(0, self.NUM_CLASSES, (size,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"image": self.images[index], "label": self.labels[index]}
