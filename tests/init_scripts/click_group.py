"""A click group (`train.py fit --batch-size 8`): the flags are the subcommand's."""

import click


@click.group()
def cli() -> None:
    """Tools."""


@cli.command()
@click.option("--batch-size", type=int, default=32)
@click.option("--learning-rate", type=float, default=0.001)
@click.option("--epochs", type=int, default=3)
def fit(batch_size: int, learning_rate: float, epochs: int) -> None:
    raise SystemExit("training must not run under ddpcli init")


@cli.command()
def export() -> None:
    raise SystemExit("must not run")


if __name__ == "__main__":
    cli()
