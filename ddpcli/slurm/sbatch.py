"""The sbatch script that runs one planned run on a SLURM cluster: one `ddpcli launch` per node.

Pure on purpose (no torch, no rich, no subprocess): the exact text is pinned by a golden file and can be read
before anything waits in a queue. The job asks SLURM for the nodes, then `srun` starts one `ddpcli launch` per node,
hence one torchrun agent per node. The agents meet at a c10d rendezvous on the allocation's first node, keyed by the
job id, which also names the run directory (`<runs_dir>/<name>/<job id>/`) so every node writes into the same one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.experiment.resolved import ResolvedRun

# A port derived from the job id keeps two jobs that share a node apart; the range stays below Linux's ephemeral
# ports (32768 and up), where an outgoing connection could already hold the number.
PORT_BASE = 20000
PORT_SPAN = 10000
# sbatch reads `#SBATCH` lines itself, not through a shell: a value with blanks or quotes would be split or kept
# verbatim depending on the SLURM version, and a newline would start a line of its own. Accept plain tokens only
# (matched whole: with `$`, "gpu\n" would pass).
DIRECTIVE_VALUE = re.compile(r"[^\s'\"\\#]+")


@dataclass(frozen=True)
class SlurmOptions:
    """What the script needs besides the run; the CLI fills it from its flags."""

    experiment_file: Path
    """Absolute path of the experiment file, so the job runs what was planned wherever sbatch starts it."""
    python: str
    """The interpreter every node runs `-m ddpcli launch` with (the CLI's own, by default)."""
    partition: str | None = None
    time: str | None = None
    """sbatch's time limit format, e.g. `02:00:00` or `1-00:00:00`."""
    account: str | None = None
    gpus_per_node: int | None = None
    """None: one GPU per process (nproc_per_node). 0: a CPU cluster, no `--gpus-per-node` line."""
    cpus_per_task: int | None = None
    """CPUs for the one task per node, i.e. for all its processes; repeated on srun (see `_srun_options`)."""
    job_log: str | None = None
    """sbatch `--output`: where SLURM writes the job's stdout and stderr (`%j` is the job id)."""
    port: int | None = None
    """Fixed rendezvous port; None derives one from the job id."""
    runs_dir: Path | None = None
    """Passed on to `ddpcli launch --runs-dir`; None keeps the experiment file's runs_dir."""


def sbatch_script(run: ResolvedRun, options: SlurmOptions) -> str:
    """The whole job script for `run`, ending with a newline."""
    for flag, value in (("--python", options.python), ("the experiment file", str(options.experiment_file)),
                        ("--runs-dir", str(options.runs_dir or ""))):  # fmt: skip
        _check_writable(flag, value)
    lines = [
        "#!/bin/bash",
        *_directives(run, options),
        "#",
        *_explanation(run, options),
        "set -euo pipefail",
        ': "${SLURM_JOB_ID:?submit this script with sbatch}"',
        "",
        # All of scontrol's output, then its first line: `| head -n 1` under pipefail ends the job with SIGPIPE
        # when scontrol is still writing as head exits (a long node list).
        'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "head_node=${nodes%%$'\\n'*}",
        _port_line(options.port),
        'echo "ddpcli: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, rendezvous at $head_node:$port"',
        "",
        *_srun_lines(run, options),
    ]
    return "\n".join(lines) + "\n"


def node_counts(run: ResolvedRun) -> tuple[str, str]:
    """(sbatch `--nodes`, launch `--nnodes`): `2` and `2`, or `1-4` and `1:4` for an elastic run."""
    plan = run.plan
    if plan.is_elastic:
        return f"{plan.min_nnodes}-{plan.nnodes}", f"{plan.min_nnodes}:{plan.nnodes}"
    return str(plan.nnodes), str(plan.nnodes)


def _directives(run: ResolvedRun, options: SlurmOptions) -> list[str]:
    per_node = run.plan.nproc_per_node
    gpus = per_node if options.gpus_per_node is None else options.gpus_per_node
    if 0 < gpus < per_node:
        raise UserError(
            f"--gpus-per-node {gpus} is fewer than the run's {per_node} processes per node, and each "
            "process needs a GPU of its own; use 0 for a CPU-only cluster"
        )
    values: list[tuple[str, object | None]] = [
        ("job-name", run.name),
        ("nodes", node_counts(run)[0]),
        ("ntasks-per-node", 1),
        ("gpus-per-node", gpus or None),
        ("cpus-per-task", options.cpus_per_task),
        ("partition", options.partition),
        ("account", options.account),
        ("time", options.time),
        ("output", options.job_log),
    ]
    return [_directive(key, value) for key, value in values if value is not None]


def _directive(key: str, value: object) -> str:
    text = str(value)
    if not DIRECTIVE_VALUE.fullmatch(text) or not text.isprintable():
        raise UserError(f"sbatch --{key} {text!r}: must be one word, without blanks, quotes, '\\' or '#'")
    _check_writable(f"--{key}", text)
    return f"#SBATCH --{key}={text}"


def _check_writable(flag: str, text: str) -> None:
    """Shell-quoting keeps any text intact except a NUL byte (bash cannot hold one) and text that is not UTF-8
    (a file name of undecodable bytes): refuse those instead of writing a script that runs something else."""
    if "\0" in text:
        raise UserError(f"{flag} {text!r}: holds a NUL byte, which no shell script can")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{flag} {text!r}: is not valid UTF-8, so the job script could not hold it") from None


def _explanation(run: ResolvedRun, options: SlurmOptions) -> list[str]:
    nodes, per_node = node_counts(run)[1], run.plan.nproc_per_node
    lines = [
        f"# Written by `ddpcli slurm`: run {run.name} of {options.experiment_file}",
        f"# (nnodes {nodes}, nproc_per_node {per_node}). srun starts one `ddpcli launch`, hence one torchrun",
        "# agent, per node; the agents meet at a c10d rendezvous on the first node, keyed by the job id, which",
        f"# also names the run directory: <runs_dir>/{run.name}/<job id>/.",
    ]
    return [_printable(line) for line in lines]


def _printable(text: str) -> str:
    """For comments: a newline in a file name must not end the comment and start a command."""
    return "".join(char if char.isprintable() else "?" for char in text)


def _port_line(port: int | None) -> str:
    if port is not None:
        return f"port={port}"
    return f"port=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))  # from the job id: jobs sharing a node differ"


def _srun_lines(run: ResolvedRun, options: SlurmOptions) -> list[str]:
    """`srun ... python -m ddpcli launch ...`, wrapped over lines; every fixed word is shell-quoted."""
    srun = ["srun", *_srun_options(options)]
    launch = [options.python, "-m", "ddpcli", "launch", str(options.experiment_file), "--only", run.name]
    launch += ["--nnodes", node_counts(run)[1]]
    if options.runs_dir is not None:
        launch += ["--runs-dir", str(options.runs_dir)]
    rendezvous = '--rdzv-endpoint "$head_node:$port" --rdzv-id "$SLURM_JOB_ID"'
    return [f"{shlex.join(srun)} \\", f"  {shlex.join(launch)} \\", f"  {rendezvous}"]


def _srun_options(options: SlurmOptions) -> list[str]:
    # Since SLURM 22.05 srun no longer inherits sbatch's --cpus-per-task: without repeating it, all the processes
    # of a node would share one CPU.
    cpus = [f"--cpus-per-task={options.cpus_per_task}"] if options.cpus_per_task is not None else []
    return ["--kill-on-bad-exit=1", *cpus]
