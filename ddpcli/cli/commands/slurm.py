"""`ddpcli slurm`: the sbatch script for one run of an experiment file, printed, written, or submitted."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from ddpcli.cli.commands import DEFAULT_EXPERIMENT_FILE, ExperimentFileArgument
from ddpcli.cli.console import say, user_errors, write_text, wrote
from ddpcli.errors import UserError
from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.resolved import Plan, ResolvedRun
from ddpcli.slurm.sbatch import SlurmOptions, sbatch_script

SBATCH_TIMEOUT_S = 60
JOB = "sbatch options"


@user_errors
def slurm_command(
    file: ExperimentFileArgument = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", help="Only this run: the run to submit (given once: one job runs one run).", show_default=False
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the script to this file instead of printing it.")
    ] = None,
    submit: Annotated[bool, typer.Option("--submit", help="Submit it with sbatch and print the job id.")] = False,
    partition: Annotated[str | None, typer.Option(help="SLURM partition.", rich_help_panel=JOB)] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time", help="Time limit, e.g. 02:00:00 or 1-00:00:00.", rich_help_panel=JOB)
    ] = None,
    account: Annotated[str | None, typer.Option(help="Account to charge.", rich_help_panel=JOB)] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            min=0, help="GPUs per node (default: nproc_per_node; 0 on a CPU-only cluster).", rich_help_panel=JOB
        ),
    ] = None,
    cpus_per_task: Annotated[
        int | None, typer.Option(min=1, help="CPUs per node for all its processes.", rich_help_panel=JOB)
    ] = None,
    job_log: Annotated[
        str | None, typer.Option(help="sbatch --output: the job's log file (%j = job id).", rich_help_panel=JOB)
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="Rendezvous port (default: derived from the job id).", rich_help_panel=JOB),
    ] = None,
    runs_dir: Annotated[
        Path | None, typer.Option(help="Runs directory for `ddpcli launch` (default: the file's runs_dir).")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="Python on the nodes (default: this one).", show_default=False)
    ] = None,
) -> None:
    """Write an sbatch script for one run: srun starts one `ddpcli launch` per node, and the nodes meet
    at a torchrun rendezvous on the first node. Printed by default; `--submit` queues it.

    Example: `ddpcli slurm experiments.toml --only 4x16 --partition gpu --time 01:00:00 --submit`
    """
    path = (file or DEFAULT_EXPERIMENT_FILE).resolve()
    plan = load_plan(path)
    run = _one_run(plan, only)
    options = SlurmOptions(
        experiment_file=path,
        python=python or sys.executable,
        partition=partition,
        time=time_limit,
        account=account,
        gpus_per_node=gpus_per_node,
        cpus_per_task=cpus_per_task,
        job_log=job_log,
        port=port,
        runs_dir=runs_dir.resolve() if runs_dir else None,
    )
    script = sbatch_script(run, options)
    if output is not None:
        write_text(output, script)
    if submit:
        job_id = _submit(script, output)
        print(job_id)
        run_dir = (options.runs_dir or plan.runs_dir.resolve()) / run.name / job_id
        say(f"submitted job {job_id}; its run directory will be {run_dir}")
    elif output is None:
        sys.stdout.write(script)
    else:
        wrote(output, f"; submit it with: sbatch {shell_path(output)}")


def shell_path(path: Path) -> str:
    """The path as one shell word that no command reads as an option (`-o --wrap=x` is `./--wrap=x`)."""
    text = str(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def _one_run(plan: Plan, only: list[str] | None) -> ResolvedRun:
    """A SLURM job runs exactly one run, so --only is required rather than defaulting to all of them. It is the
    same repeatable --only as plan's and launch's, given once here."""
    names = ", ".join(run.name for run in plan.runs)
    if not only:
        raise UserError(f"--only NAME is required: one job runs one run (runs in {plan.file}: {names})")
    if len(set(only)) > 1:
        raise UserError(f"--only {' --only '.join(only)}: one job runs one run; write one script per run")
    return plan.select(only[:1])[0]


def _submit(script: str, path: Path | None) -> str:
    """Run `sbatch --parsable` (the file if written, else the script on stdin) and return the job id."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError("sbatch is not on PATH: run this on a SLURM login node, or leave out --submit")
    argv = [sbatch, "--parsable", *([str(path.resolve())] if path is not None else [])]  # absolute: never an option
    try:
        done = subprocess.run(
            argv, input=None if path else script, capture_output=True, text=True, timeout=SBATCH_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"sbatch gave no answer in {SBATCH_TIMEOUT_S} s; is slurmctld up (scontrol ping)?") from None
    if done.returncode != 0:
        raise UserError(f"sbatch failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    # --parsable prints "jobid" or "jobid;cluster".
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise UserError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
    return job_id
