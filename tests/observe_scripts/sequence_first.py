"""A word_language_model-like loop (issue 27, item 10); no ddpcli import.

    python tests/observe_scripts/sequence_first.py [--batch-first] [--hand-sgd]

An LSTM language model fed `(bptt, batch)` = (8, 4) token ids (torch's default batch_first=False), as
pytorch/examples' word_language_model batchifies its corpus, 4 steps with torch.optim.SGD (lr 0.5). `--batch-first`:
the same model with batch_first=True fed (4, 8). `--hand-sgd`: the update by hand, as word_language_model's
default does: `p.data.add_(p.grad, alpha=-lr)`, no torch.optim.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.rnn = nn.LSTM(8, 8, batch_first=batch_first)
        self.head = nn.Linear(8, 20)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-first", action="store_true")
    parser.add_argument("--hand-sgd", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Model(args.batch_first)
    optimizer = None if args.hand_sgd else torch.optim.SGD(model.parameters(), lr=0.5)
    lr = 0.5
    data = torch.randint(0, 20, (40, 4))  # a corpus batchified into 4 columns
    for step in range(4):
        chunk = data[step * 8 : step * 8 + 9]
        source, target = chunk[:-1], chunk[1:]  # (bptt, batch)
        if args.batch_first:
            source, target = source.t().contiguous(), target.t().contiguous()
        model.zero_grad()
        F.cross_entropy(model(source).reshape(-1, 20), target.reshape(-1)).backward()
        if optimizer is not None:
            optimizer.step()
        else:
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)


if __name__ == "__main__":
    main()
