"""One module per command; each keeps its body short: parse, call the pure logic, render."""

from pathlib import Path
from typing import Annotated

import typer

# The experiment file argument that plan and slurm share (launch defaults it explicitly to the same file).
ExperimentFileArgument = Annotated[
    Path | None, typer.Argument(help="Experiment file (TOML). Default: ./experiments.toml.", show_default=False)
]
