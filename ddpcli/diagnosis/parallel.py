"""Findings on whether a multi-process run trained one model: no_process_group, ranks_not_synchronized,
copies_of_one_training, data_parallel_unchecked, from the check of the ranks' parameters (ddpcli.rundir.parallel
makes it: run.json's data_parallel_size). Pure.

A finding about a script with no DDP ends with how to make it data-parallel: a framework's own switch where the
script runs under one, else a pointer to `ddpcli port`. What the port would change in that very script is the
port's to say (ddpcli.port.advice.port_clause runs its rules on the script): the command that finishes a run hands
it in as `port_advice`, so diagnosis imports no command; without it the pointer is the plain one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddpcli.rundir.parallel import ParallelCheck
from ddpcli.rundir.record import Finding

# The clause ending a finding about a script with no DDP (it starts with "; "), given the script launched.
PortAdvice = Callable[[str | None], str]


def plain_port_clause(script: str | None) -> str:
    """The pointer to `ddpcli port`, without the port's own plan for the script."""
    return f"; `ddpcli port {script or 'SCRIPT'}` makes a single-device script data-parallel"


def wrappers_seen(run: dict[str, Any]) -> str:
    """What wrapped the model on rank 0, in words, for a message."""
    models = [name for name in run.get("models", []) if isinstance(name, str)] if isinstance(run, dict) else []
    if run.get("ddp") is True:
        wrapper = next((name for name in models if "DataParallel" in name), "DistributedDataParallel")
        return f"the model was wrapped in {wrapper}"
    shown = ", ".join(models[:3]) or "the model"
    return f"no DDP wrapper ({shown} trained unwrapped) and no gradient all-reduce"


def parallel_findings(
    check: ParallelCheck,
    batch: int | None,
    run: dict[str, Any],
    script: str | None = None,
    port_advice: PortAdvice = plain_port_clause,
) -> list[Finding]:
    """`batch`: the samples one process put into an optimizer step (per-device batch x accumulation); `script`: the
    plan's script, for the pointer to `ddpcli port` on a script with no DDP (in `port_advice`'s words)."""
    n = check.processes
    alone = f" (a global batch of {batch} each, not {n * batch})" if batch is not None else ""
    port = _fix(check, script, port_advice) if run.get("ddp") is not True else ""
    if check.process_group is False and n > 1 and check.size is not None:
        each = f" (each one a batch of {batch} per optimizer step)" if batch is not None else ""
        return [Finding(
            code="no_process_group", severity="error",
            message=f"{n} processes were launched and none called init_process_group: they never communicated, so "
            f"this was {n} separate trainings of one process each{each}{port}",
        )]  # fmt: skip
    if check.copies:
        return [copies_finding(check, batch, run, script, port_advice)]
    if check.synchronized is False:
        difference = (
            f", largest difference {check.largest_difference:.3g} in the sampled parameters"
            if check.largest_difference
            else ""
        )
        together = f" (only {check.size} of {n} ranks hold rank 0's parameters)" if (check.size or 1) > 1 else ""
        return [Finding(
            code="ranks_not_synchronized", severity="error",
            message=f"the ranks ended with different parameters{difference}{together}: the processes never averaged "
            f"gradients and each trained its own model, {n} separate trainings{alone}; seen: {wrappers_seen(run)}"
            f"{port}",
        )]  # fmt: skip
    if check.sharded:
        return [Finding(
            code="data_parallel_unchecked", severity="info",
            message=f"the ranks hold shards of the parameters ({check.sharded}): the check that they trained one "
            "model does not apply",
        )]  # fmt: skip
    return []


SWITCHES = (  # the framework switch without which its CPU runs under torchrun are not data-parallel
    ("transformers", "transformers' Trainer wraps the model in DDP on CPU only with --use_cpu "
                     "(TrainingArguments(use_cpu=True))"),
    ("accelerate", "accelerate runs data-parallel on CPU only with --cpu (Accelerator(cpu=True))"),
)  # fmt: skip


def copies_finding(
    check: ParallelCheck,
    batch: int | None,
    run: dict[str, Any],
    script: str | None = None,
    port_advice: PortAdvice = plain_port_clause,
) -> Finding:
    """`copies_of_one_training`: the ranks agree because they computed the same thing, not because they averaged."""
    n = check.processes
    each = f", each a batch of {batch} per optimizer step" if batch is not None else ""
    fix = _fix(check, script, port_advice)
    return Finding(
        code="copies_of_one_training", severity="error",
        message=f"{n} processes were launched and trained {n} copies of one training{each}: they ended with equal "
        f"parameters only because every rank started from the same seed and trained on the same batches; nothing "
        f"averaged them ({wrappers_seen(run)}), so data_parallel_size is 1 and the samples are one model's{fix}",
    )  # fmt: skip


def _fix(check: ParallelCheck, script: str | None, port_advice: PortAdvice) -> str:
    """The framework's switch that makes the run data-parallel where one is known, else `ddpcli port`."""
    switch = next((words for name, words in SWITCHES if name in check.frameworks), None)
    if switch:
        return f"; {switch}"
    return port_advice(script)
