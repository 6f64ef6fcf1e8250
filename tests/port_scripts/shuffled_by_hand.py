"""Stand-in (ours) for two published patterns of data batched by hand and shuffled each epoch, no DataLoader:
d2l-ai/d2l-en's `data_iter` (linear regression from scratch: a generator that shuffles a list of indices with
random.shuffle and yields the slices `indices[i:min(i + batch_size, n)]`), and a permutation drawn each epoch with
torch.randperm in the training loop itself, its slices taken there (`--batches loop`). Under torchrun the ranks
draw from streams of their own once training starts (noise must differ per rank): each rank's slice of its own
permutation, and the shards overlap. It prints, per epoch, how many samples it trained on and how many distinct."""

import argparse
import random

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--batches", choices=["generator", "loop"], default="generator")
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()


def data_iter(batch_size, features, labels):
    num_examples = len(features)
    indices = list(range(num_examples))
    random.shuffle(indices)
    for i in range(0, num_examples, batch_size):
        batch_indices = torch.tensor(indices[i : min(i + batch_size, num_examples)])
        yield features[batch_indices], labels[batch_indices]


torch.manual_seed(0)
random.seed(0)
features = torch.arange(64.0).unsqueeze(1)
labels = 0.5 * features + torch.randn(64, 1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
seen = []
for epoch in range(2):
    if args.batches == "loop":
        perm = torch.randperm(len(features))
        for start in range(0, len(features), args.batch_size):
            index = perm[start : start + args.batch_size]
            x, y = features[index], labels[index]
            seen += x.flatten().int().tolist()
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    else:
        for x, y in data_iter(args.batch_size, features, labels):
            seen += x.flatten().int().tolist()
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    epoch_seen = seen[-(len(seen) // (epoch + 1)) :]
    with torch.no_grad():
        loss = F.mse_loss(model(features), labels).item()
    print(f"epoch {epoch}: trained on {len(epoch_seen)} samples, {len(set(epoch_seen))} distinct; loss {loss:.4f}")
