"""A token model trained the way language-model scripts often are, for tests/test_observer_hooks.py: a loss module
fed logits flattened to batch x tokens, `torch.autograd.backward([loss])`, a DataLoader given a batch_sampler, and
an optimizer step before any forward (the call some scripts make to silence a scheduler warning).

    DDPCLI_RUN_DIR=/tmp/x python -m ddpcli.worker.observer tests/scripts/observer_lm_probe.py --batch-size 4
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

VOCAB, LENGTH = 16, 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (64, LENGTH + 1))
    data = TensorDataset(tokens[:, :-1], tokens[:, 1:])
    loader = DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), args.batch_size, drop_last=True))
    model = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.step()  # before any forward: no gradients yet, nothing changes
    for step, (inputs, targets) in enumerate(loader):
        if step == args.steps:
            break
        logits = model(inputs)
        loss = criterion(logits.view(-1, VOCAB), targets.reshape(-1))  # batch x tokens rows
        torch.autograd.backward([loss])
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
