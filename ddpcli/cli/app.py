"""The `ddpcli` command: one root Typer app, one module per command under ddpcli/commands/."""

from __future__ import annotations

from collections.abc import Sequence

import typer

from ddpcli import __version__
from ddpcli.cli.commands import compare, init, launch, plan, slurm

app = typer.Typer(
    name="ddpcli",
    help="Plan, launch and compare PyTorch DistributedDataParallel runs: what your batch size, learning rate "
    "and epoch become on N GPUs, proven with real torchrun jobs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,
)
app.command("plan")(plan.plan_command)
app.command("launch")(launch.launch_command)
app.command("compare")(compare.compare_command)
app.command("slurm")(slurm.slurm_command)
app.command("init")(init.init_command)


def _version(value: bool) -> None:
    if value:
        print(f"ddpcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Plan, launch and compare DDP runs."""


def main(argv: Sequence[str] | None = None) -> None:
    app(args=list(argv) if argv is not None else None, prog_name="ddpcli")
