"""A typer command (rich help boxes when rich is installed)."""

import typer


def train(
    batch_size: int = typer.Option(64, help="Batch per device."),
    learning_rate: float = typer.Option(0.001, help="Learning rate."),
    warmup: int = typer.Option(100, help="Warmup steps."),
    iterations: int = typer.Option(1000, help="Optimizer steps."),
    name: str = typer.Option("run", help="A label."),
) -> None:
    raise SystemExit("training must not run under ddpcli init")


def make_optimizer(parameters, lr):
    """What the training would build (never reached under --help): init reads the SGD class from the source."""
    import torch

    return torch.optim.SGD(parameters, lr=lr)


if __name__ == "__main__":
    typer.run(train)
