"""Stand-in (ours) for a published pattern (the builders of torchvision's references and of config-driven projects:
build_model, build_optimizer and build_loaders in a module of their own, train_one_epoch and evaluate in
engine.py): the script only wires them, with the loaders in a dict the builder returns, `loaders["train"]` handed
to the epoch by keyword and `loaders["val"]` to the evaluation."""

import argparse

import torch
from builders import build_loaders, build_model, build_optimizer
from engine import evaluate, train_one_epoch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()
cfg = {"hidden": 8, "lr": 0.05, "batch": args.batch}
torch.manual_seed(0)
model = build_model(cfg)
optimizer = build_optimizer(cfg, model)
loaders = build_loaders(cfg)
print(f"batches: train {len(loaders['train'])}, val {len(loaders['val'])}")
for epoch in range(2):
    seen = train_one_epoch(model=model, data_loader=loaders["train"], optimizer=optimizer, epoch=epoch)
    print(f"epoch {epoch}: trained on {seen}, val loss {evaluate(model, loaders['val']):.6f}")
torch.save(model.state_dict(), "model.pt")
