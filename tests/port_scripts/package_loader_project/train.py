"""Stand-in (ours) for a published pattern (jfzhang95/pytorch-deeplab-xception: train.py, dataloaders/__init__.py,
modeling/deeplab.py, utils/summaries.py): the Trainer class of the script unpacks `self.train_loader,
self.val_loader, self.nclass = make_data_loader(args)`, a function the data package's __init__.py defines; the
optimizer takes two parameter groups from generators of the model's own class (`model.get_1x_lr_params()`,
`model.get_10x_lr_params()` at ten times the lr); the SummaryWriter comes from a method of utils/summaries.py's
class, and the script logs to it; each batch is a dict."""

import argparse

import torch
import torch.nn.functional as F
from data import make_data_loader
from modeling.net import Net
from utils.summaries import TensorboardSummary


class Trainer:
    def __init__(self, args):
        self.args = args
        self.summary = TensorboardSummary("run")
        self.writer = self.summary.create_summary()
        self.train_loader, self.val_loader, self.nclass = make_data_loader(args)
        model = Net(self.nclass)
        train_params = [{"params": model.get_1x_lr_params(), "lr": args.lr},
                        {"params": model.get_10x_lr_params(), "lr": args.lr * 10}]  # fmt: skip
        optimizer = torch.optim.SGD(train_params, momentum=0.9)
        self.model, self.optimizer = model, optimizer

    def training(self, epoch):
        self.model.train()
        seen = 0
        for i, sample in enumerate(self.train_loader):
            image, target = sample["image"], sample["label"]
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(image), target)
            loss.backward()
            self.optimizer.step()
            self.writer.add_scalar("train/loss", loss.item(), i + len(self.train_loader) * epoch)
            seen += len(image)
        return seen

    def validation(self):
        self.model.eval()
        with torch.no_grad():
            total = sum(F.cross_entropy(self.model(s["image"]), s["label"], reduction="sum").item()
                        for s in self.val_loader)  # fmt: skip
        return total / len(self.val_loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(0)
    trainer = Trainer(args)
    for epoch in range(args.epochs):
        seen = trainer.training(epoch)
        print(f"epoch {epoch}: trained on {seen}, val loss {trainer.validation():.6f}")
    torch.save(trainer.model.state_dict(), "model.pt")
    trainer.writer.close()


if __name__ == "__main__":
    main()
