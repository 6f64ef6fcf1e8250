"""A click command (click shows no defaults unless asked; ddpcli init asks)."""

import click


@click.command()
@click.option("--per-device-batch-size", type=int, default=16, help="Batch per device.")
@click.option("--lr", type=float, default=0.01, help="Learning rate.")
@click.option("--steps", type=int, default=50, help="Optimizer steps.")
@click.option("--seed", type=int, default=3)
@click.option("--fp16/--no-fp16", default=False, help="Half precision.")
def train(per_device_batch_size: int, lr: float, steps: int, seed: int, fp16: bool) -> None:
    raise SystemExit("training must not run under ddpcli init")


def make_optimizer(parameters, lr):
    """What the training would build (never reached under --help): init reads the SGD class from the source."""
    import torch

    return torch.optim.SGD(parameters, lr=lr)


if __name__ == "__main__":
    train()
