"""One module per command; each keeps its body short: parse, call the pure logic, render."""

from pathlib import Path
from typing import Annotated

import typer

# The file plan, launch, slurm and compare read when none is named, and the file init writes by default.
DEFAULT_EXPERIMENT_FILE = Path("experiments.toml")


def default_runs_root() -> Path:
    """Where compare and export look when no runs are named: runs_dir of ./experiments.toml when there is one (a
    broken file is reported, not ignored), else ./runs."""
    if DEFAULT_EXPERIMENT_FILE.is_file():
        from ddpcli.experiment.planning import load_plan

        return load_plan(DEFAULT_EXPERIMENT_FILE).runs_dir
    return Path("runs")


def port_advice(script: str | None) -> str:
    """How `ddpcli port SCRIPT` would make a script with no DDP data-parallel, in the port's own words (it runs its
    rules on the script; ddpcli.port.advice): what launch, compare and export hand the diagnosis of the runs they
    finish, which imports no command. Imported when a finding needs it: the port's modules cost start-up time."""
    from ddpcli.port.advice import port_clause

    return port_clause(script)


# The experiment file argument that plan and slurm share (launch defaults it explicitly to the same file).
ExperimentFileArgument = Annotated[
    Path | None, typer.Argument(help="Experiment file (TOML). Default: ./experiments.toml.", show_default=False)
]

# The runs compare and export read (collect_runs), and the run they measure the others against (choose_baseline).
RunsArgument = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Run directories or runs roots. Default: runs_dir of ./experiments.toml if it exists, else ./runs.",
        metavar="RUNS",
        show_default=False,
    ),
]
AllRunsOption = Annotated[bool, typer.Option("--all", help="Every run under a root, not just the newest of each name.")]
BaselineOption = Annotated[
    str | None, typer.Option(help="Name of the run to measure against. Default: the experiment file's baseline.")
]
