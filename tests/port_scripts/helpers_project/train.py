"""Ours: a single-device project whose helpers live in modules beside the script, reproducing published patterns:
Pytorch-UNet (milesial/Pytorch-UNet) reads `net.n_classes` of the model its evaluate.py is given, Aladdin
Persson's Machine-Learning-Collection keeps `save_checkpoint(model, optimizer, filename)` and
`load_checkpoint(path, model, optimizer)` in utils.py (the load called after the model is set up), timm's ModelEmaV2
copies the trained model with copy.deepcopy, and the script writes an attribute its model's forward reads."""

import argparse
import copy

import torch
from evaluate import evaluate
from torch import nn
from utils import load_checkpoint, save_checkpoint


class Net(nn.Module):
    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes
        self.temperature = 1.0
        self.body = nn.Linear(8, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) / self.temperature

    def predict(self, x: torch.Tensor) -> list[int]:
        return self.forward(x).argmax(1).tolist()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--load", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size)  # in order: 2 x B/2 is 1 x B's batches
    eval_loader = torch.utils.data.DataLoader(data, batch_size=32)
    model = Net(n_classes=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.load:
        load_checkpoint(args.load, model, optimizer)
    ema = copy.deepcopy(model)
    model.temperature = 2.0
    for epoch in range(args.epochs):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for averaged, trained in zip(ema.parameters(), model.parameters(), strict=True):
                    averaged.mul_(0.9).add_(trained, alpha=0.1)
        print(f"epoch {epoch}: accuracy {evaluate(model, eval_loader):.4f}")
    print("predicted", model.predict(x[:4]), "classes", model.n_classes)
    save_checkpoint(model, optimizer, "checkpoint.pt")
    torch.save(ema.state_dict(), "ema.pt")


if __name__ == "__main__":
    main()
