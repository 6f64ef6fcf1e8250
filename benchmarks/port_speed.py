"""How long `ddpcli port` takes on long scripts (issue 39 item 14): a training script grown to N lines by helper
functions like a real one's (loops, prints, comprehensions), ported in-process, the best of a few runs.

    PYTHONPATH=. python benchmarks/port_speed.py 2500 10000

Linear is the aim: 4 x the lines in about 4 x the time.
"""

from __future__ import annotations

import sys
import time

from ddpcli.port.engine import port_source

HEAD = """import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
"""
HELPER = '''
def helper_{i}(model, loader, epoch):
    """Evaluate one epoch."""
    total = 0.0
    for batch_idx, (x, y) in enumerate(loader):
        out = model(x)
        loss = F.mse_loss(out, y)
        if batch_idx % 10 == 0:
            print(f"epoch {{epoch}} batch {{batch_idx}} loss {{loss.item():.4f}}")
        total += loss.item()
    values = [v * 2 for v in range(10) if v % 3]
    return total / max(1, len(loader))
'''
MAIN = """
def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(epoch, helper_0(model, train_loader, epoch))
    torch.save(model.state_dict(), "m.pt")


if __name__ == "__main__":
    main()
"""


def script(lines: int) -> str:
    """A training script of about `lines` lines."""
    helpers = max(1, (lines - 25) // HELPER.count("\n"))
    return HEAD + "".join(HELPER.format(i=i) for i in range(helpers)) + MAIN


def seconds(source: str, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        port_source(source, "long.py")
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str]) -> None:
    for lines in [int(arg) for arg in argv] or [2500, 10000]:
        source = script(lines)
        print(f"{source.count(chr(10))} lines: {seconds(source):.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
