"""Stand-in (ours) for a published pattern (pytorch/examples' word_language_model): the whole model is saved with
`torch.save(model, f)` when it is the best so far and loaded back for the final test with torch.load under
`torch.serialization.safe_globals([...its classes])`, weights_only as torch >= 2.6 loads by default."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        with open("model.pt", "wb") as f:
            torch.save(model, f)
    with open("model.pt", "rb") as f, torch.serialization.safe_globals([Net, nn.Linear]):
        model = torch.load(f)
    print("reloaded", type(model).__name__, round(float(sum(p.sum() for p in model.parameters())), 4))


if __name__ == "__main__":
    main()
