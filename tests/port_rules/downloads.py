"""A single-device script whose dataset downloads into a shared folder, as torchvision's
`datasets.MNIST(root, download=True)` does: our own dataset, which "downloads" by writing its file (a partial file
renamed into place) and appends one line per process that did to downloads.log."""

import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Downloaded(Dataset):
    def __init__(self, root: str, download: bool = False) -> None:
        folder = Path(root)
        self.file = folder / "data.bin"
        if download and not self.file.exists():
            folder.mkdir(parents=True, exist_ok=True)
            log = os.open(folder / "downloads.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.write(log, f"{os.getpid()}\n".encode())
            os.close(log)
            part = folder / f"data.{os.getpid()}.part"
            torch.randn(64, 5, generator=torch.Generator().manual_seed(3)).numpy().tofile(part)
            time.sleep(0.5)  # a download takes a while: the other processes would start theirs meanwhile
            os.replace(part, self.file)
        self.rows = torch.from_numpy(np.fromfile(self.file, dtype=np.float32).reshape(64, 5))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rows[index, :4], self.rows[index, 4:]


def main() -> None:
    torch.manual_seed(0)
    dataset = Downloaded("data", download=True)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        print(f"epoch {epoch}: done")


if __name__ == "__main__":
    main()
