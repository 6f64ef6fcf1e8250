"""Reproduces the pattern of huggingface/accelerate/examples/nlp_example.py (not a copy): a script written for
accelerate: Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision), a training_function(config, args)
called from main() with argparse (--mixed_precision, --cpu), gradient accumulation by hand when the batch exceeds a
maximum, a linear warmup schedule from transformers, accelerator.prepare(...), accelerator.backward(loss),
gather_for_metrics in evaluation, accelerator.print. Our own tiny model and synthetic token data (no download);
`ddpcli port` must refuse it and name accelerate's own switch."""

import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_linear_schedule_with_warmup

MAX_BATCH = 16


class BagOfTokens(nn.Module):
    def __init__(self, vocab: int = 50, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, width)
        self.head = nn.Linear(width, 2)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def loaders(batch_size: int):
    rng = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 50, (160, 12), generator=rng)
    labels = (tokens[:, 0] > 25).long()
    train = DataLoader(TensorDataset(tokens[:128], labels[:128]), batch_size=batch_size, shuffle=True)
    valid = DataLoader(TensorDataset(tokens[128:], labels[128:]), batch_size=32)
    return train, valid


def training_function(config, args):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    torch.manual_seed(config["seed"])
    batch_size = config["batch_size"]
    accumulation = 1
    if batch_size > MAX_BATCH:
        accumulation = batch_size // MAX_BATCH
        batch_size = MAX_BATCH
    train_loader, valid_loader = loaders(batch_size)
    model = BagOfTokens()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    schedule = get_linear_schedule_with_warmup(optimizer, 10, len(train_loader) * config["num_epochs"])
    model, optimizer, train_loader, valid_loader, schedule = accelerator.prepare(
        model, optimizer, train_loader, valid_loader, schedule
    )
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["num_epochs"]):
        model.train()
        for step, (tokens, labels) in enumerate(train_loader):
            loss = loss_fn(model(tokens), labels) / accumulation
            accelerator.backward(loss)
            if step % accumulation == 0:
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
        model.eval()
        right = total = 0
        for tokens, labels in valid_loader:
            with torch.no_grad():
                guesses = model(tokens).argmax(dim=-1)
            guesses, labels = accelerator.gather_for_metrics((guesses, labels))
            right += (guesses == labels).sum().item()
            total += labels.numel()
        accelerator.print(f"epoch {epoch}: accuracy {right / total:.3f}")
    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description="accelerate training on synthetic tokens")
    parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16", "fp8"])
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    args = parser.parse_args()
    training_function({"lr": 2e-3, "num_epochs": 2, "seed": 42, "batch_size": 16}, args)


if __name__ == "__main__":
    main()
