"""`ddpcli init`: from the training script a user already has to an experiment file that plans and launches."""

from __future__ import annotations

import math
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ddpcli.cli.commands import DEFAULT_EXPERIMENT_FILE
from ddpcli.cli.console import say, user_errors, warning, write_text, wrote
from ddpcli.errors import UserError
from ddpcli.experiment.planning import resolve_plan
from ddpcli.init.inspect_script import inspect_script
from ddpcli.init.paths import check_output, check_script, refuse_own_script
from ddpcli.init.scaffold import (
    MODULE_NAME,
    InitRequest,
    Scaffold,
    build_experiment,
    default_world_sizes,
    parse_world_sizes,
)
from ddpcli.init.script_help import DEFAULT_TIMEOUT_S, gpu_count
from ddpcli.init.script_kind import module_source

EXAMPLE = "experiments.toml"  # ddpcli/examples/experiments.toml: the repository root's file, shipped in the wheel


@user_errors
def init_command(
    script: Annotated[
        Path | None,
        typer.Argument(
            metavar="SCRIPT", help="Your training script (a .py file). Or give a module with -m.", show_default=False
        ),
    ] = None,
    module: Annotated[
        str | None,
        typer.Option(
            "--module", "-m", help="A module run as `python -m MODULE` (e.g. `mypkg.train`) instead of a script."
        ),
    ] = None,
    per_device_batch_size: Annotated[
        int | None,
        typer.Option(min=1, help="The one-device batch that worked. Default: the script's batch flag default."),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(help="The one-device learning rate. Default: the script's lr default."),
    ] = None,
    nproc_per_node: Annotated[
        list[str] | None,
        typer.Option(
            "--nproc-per-node",
            metavar="N,...",
            help="Processes (GPUs) per node to try, each a world size, comma-separated or repeated (`2,4`). "
            "Default: 2 and 4, or the GPUs `nvidia-smi -L` lists.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The experiment file to write.")
    ] = DEFAULT_EXPERIMENT_FILE,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
    to_stdout: Annotated[bool, typer.Option("--print", help="Print the file to stdout instead of writing it.")] = False,
    example: Annotated[
        bool,
        typer.Option("--example", help="Write the bundled example's experiment file (no script needed)."),
    ] = False,
    help_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds the script's --help may take (it may import torch).")
    ] = DEFAULT_TIMEOUT_S,
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- ARGS",
            help="Fixed arguments for every run, after `--`: the script's required positionals and options "
            "(`ddpcli init train.py -- 2 1`); a value for a flag init wires is the baseline's value instead.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write an experiment file for your own training script, read from its source and `--help`, without training.

    `ddpcli init train.py && ddpcli plan && ddpcli launch`

    It reads the script's syntax tree first and runs `python train.py --help` only when the script builds a
    parser (argparse, click, typer, HfArgumentParser, jsonargparse, LightningCLI `fit`, Fire, ...; same Python,
    no shell, cwd the script's folder, for `-m` the output file's folder); nanoGPT-style configurator globals are
    read without running anything, and a script that reads sys.argv itself is never run. It finds the usual
    spellings of the per-device batch (`--batch-size`, `--batch_size`, `--bs`,
    `--per_device_train_batch_size`, ...), gradient accumulation, lr, warmup, steps or epochs, seed and output
    directory (argparse, click, typer and HfArgumentParser scripts), and wires each to its `{placeholder}` in
    `args`, with the script's defaults (or your `--per-device-batch-size` / `--lr`) as the 1-process baseline.
    For each world size it adds one run that keeps the per-device batch (global batch grows, lr scaled) and one
    that keeps the global batch (smaller per-device batch, or less accumulation).

    A flag it cannot find or cannot wire is listed at the top of the file and on stderr; the runs then use the
    script's own value. Frameworks' switches are set from data tables: Lightning's `--devices`, `--num_nodes`
    and `--strategy`, accelerate's `--cpu` (or ACCELERATE_USE_CPU=1), the Trainer's `--use_cpu` and `--ddp_backend
    gloo`, Fabric's LT_* environment and `--device cpu` on a machine without GPUs, timm's own lr rule turned off by
    passing `--lr`. A batch the script derives from the world size (`bsz = 128 // world_size`, a token budget
    `total // (B * T * world)`) is planned as the script computes it. Required positionals and options, and the
    subcommand of a script that has them, go after `--`. The script itself is never written over.

    `ddpcli init --example` writes the bundled example's file instead. An existing file is never overwritten
    without `--force`; `--print` writes to stdout.
    """
    if example:
        if script is not None or module is not None or per_device_batch_size or lr or nproc_per_node:
            raise UserError("--example writes the bundled file: give no script, -m, batch, lr or --nproc-per-node")
        _emit(bundled_example(), output, force, to_stdout)
        if not to_stdout:
            wrote(output, f" (the bundled example); next: {_next_steps(output)}")
        return
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise UserError(f"--lr {lr}: expected a positive finite number")
    fixed_args = tuple(script_args or ())
    if module is not None and script is not None and not str(script).endswith(".py"):
        script, fixed_args = None, (str(script), *fixed_args)  # `-m pkg -- 2 1`: the first value after `--`
    if (script is None) == (module is None):
        raise UserError("give your training script (ddpcli init train.py) or a module (-m pkg.train), one of them")
    if module is not None and not MODULE_NAME.match(module):
        raise UserError(f"-m {module!r}: expected a dotted module name such as mypkg.train")
    script_path = check_script(script) if script is not None else None
    if not to_stdout:
        refuse_own_script(output, script_path or _module_file(module))
        check_output(output)
    _refuse_overwrite(output, force, to_stdout)
    out_dir = output.parent.resolve()
    if not out_dir.is_dir():
        raise UserError(f"{output}: no such directory {output.parent}")
    if script is not None:
        assert script_path is not None
        help_cwd = script_path.parent
        written_script: str | None = _relative(script, out_dir)
    else:
        help_cwd, written_script = out_dir, None
    gpus = gpu_count()
    world_sizes = parse_world_sizes(nproc_per_node) if nproc_per_node else default_world_sizes(gpus)
    # what a slow --help waits for, to a person at a terminal (a pipe keeps its one-line errors)
    notice = say if sys.stderr.isatty() else None
    inspection = inspect_script(script, module, help_cwd, help_timeout, fixed_args, notice)
    if not to_stdout:
        refuse_own_script(output, inspection.path)  # -m: the module's source, as found from the file's folder
    first = (single_device_message(script, module),) if inspection.single_device and inspection.path else ()
    request = InitRequest(
        script=written_script,
        module=module,
        help_command=inspection.command,
        per_device_batch_size=per_device_batch_size,
        lr=lr,
        world_sizes=world_sizes,
        fixed_args=fixed_args if inspection.fixed_args is None else inspection.fixed_args,
        prefix=inspection.prefix,
        cpu_only=not gpus,
    )
    scaffold = build_experiment(
        request, inspection.options, inspection.source, inspection.not_run, tuple(inspection.warnings), first
    )
    _check_plans(scaffold, output)
    for message in scaffold.warnings:
        warning(message)
    _emit(scaffold.text, output, force, to_stdout)
    if not to_stdout:
        how = (
            f"read from `{inspection.command}` in {inspection.seconds:.1f} s"
            if inspection.options is not None and inspection.seconds
            else f"read from {inspection.command}"
            if inspection.options is not None
            else "the script was not run"
        )
        wrote(output, f": {', '.join(scaffold.run_names)} ({how}); next: {_next_steps(output)}")


def single_device_message(script: Path | None, module: str | None) -> str:
    """Issue 25: a script without DDP gets N separate trainings from N processes; `ddpcli port` writes the copy."""
    target = str(script) if script is not None else f"-m {module}"
    port = (
        f"`ddpcli port {script}` writes a data-parallel copy, {script.stem}_ddp.py, to init instead"
        if script is not None
        else "`ddpcli port` on its file writes a data-parallel copy to init instead"
    )
    return (
        f"{target} has no DDP (no init_process_group, no DistributedDataParallel, no framework that runs it): "
        f"each process of a multi-process run trains alone; {port}"
    )


def _module_file(module: str | None) -> Path | None:
    """The file `python -m MODULE` would run from here (found without importing), to keep -o off it."""
    if module is None:
        return None
    return module_source(module, [Path.cwd(), *map(Path, sys.path[1:])])


def bundled_example() -> str:
    """The experiment file for ddpcli.examples.regression, shipped inside the package (no checkout needed)."""
    return resources.files("ddpcli.examples").joinpath(EXAMPLE).read_text(encoding="utf-8")


def _refuse_overwrite(output: Path, force: bool, to_stdout: bool) -> None:
    if not to_stdout and not force and output.exists():
        raise UserError(f"{output} exists; pass --force to overwrite it, -o for another file, or --print")


def _emit(text: str, output: Path, force: bool, to_stdout: bool) -> None:
    if to_stdout:
        print(text, end="")
        return
    _refuse_overwrite(output, force, to_stdout)
    write_text(output, text)


def _check_plans(scaffold: Scaffold, output: Path) -> None:
    """The text must be what `ddpcli plan` accepts; a failure here is a bug in init, shown with the text's error."""
    from ddpcli.experiment.loading import parse_experiment_text

    resolve_plan(parse_experiment_text(scaffold.text, output), output)


def _relative(script: Path, out_dir: Path) -> str:
    """The script's path as the experiment file names it: relative to the file's folder when the script is in that
    folder's tree (the two then move together), else absolute."""
    resolved = script.resolve()
    return os.path.relpath(resolved, out_dir) if resolved.is_relative_to(out_dir) else str(resolved)


def _next_steps(output: Path) -> str:
    if output == DEFAULT_EXPERIMENT_FILE:
        return "ddpcli plan && ddpcli launch"
    return f"ddpcli plan {escape(str(output))} && ddpcli launch {escape(str(output))}"
