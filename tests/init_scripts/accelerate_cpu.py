"""The pattern of accelerate's by_feature examples: --cpu and --mixed_precision flags, a
--gradient_accumulation_steps flag, but batch size and lr hard-coded in a config dict, and a linear warmup
schedule built in the script. On a CPU-only machine without --cpu, accelerate under torchrun runs one separate
training per process."""

import argparse
import json

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def factor(step):
        if step < num_warmup_steps:
            return (step + 1) / num_warmup_steps
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def training_function(config, args):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision,
                              gradient_accumulation_steps=args.gradient_accumulation_steps)  # fmt: skip
    torch.manual_seed(config["seed"])
    data = TensorDataset(torch.randn(96, 4), torch.randn(96, 1))
    loader = DataLoader(data, batch_size=config["batch_size"], shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=100)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    print("received " + json.dumps({"rank": accelerator.process_index, "processes": accelerator.num_processes,
                                    "distributed_type": str(accelerator.distributed_type)}), flush=True)  # fmt: skip
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16", "fp8"])
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    args = parser.parse_args()
    config = {"lr": 2e-3, "num_epochs": 1, "seed": 42, "batch_size": 16}
    training_function(config, args)


if __name__ == "__main__":
    main()
