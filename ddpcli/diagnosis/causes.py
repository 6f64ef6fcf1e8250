"""What explains a run that did not follow its plan, named from what was observed, never guessed. Pure.

A plan_mismatch says which number differs; this module adds why, when the observation shows it:
- accumulation = planned / world size: the script divides its accumulation by the number of processes (nanoGPT's
  `gradient_accumulation_steps //= ddp_world_size`), so it wants the total over every process;
- optimizer steps = plan + 1: the loop runs once more than the count it is given (`while iter_num <= max_iters`);
- an lr equal to the baseline's while the plan scaled it: the lr is hard-coded or its flag not wired;
- fewer steps after loading a file before the first step: the script resumed from a checkpoint (and which run
  wrote it, when the worker could tell);
- a global batch smaller than planned because the processes trained separately, one process where several were
  launched because none started a process group.
Also the findings of their own: a checkpoint another run wrote, loaded at start (`resumed_from_other_run`), a
script that started processes of its own (`script_spawned_processes`), a loss back-propagated at world-size times
the one the model returned (`loss_scaled_by_world_size`).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from ddpcli.diagnosis.derived import derived_cause, partial_batch_cause
from ddpcli.jsonvalues import finite_or_none, text_or_none, whole_or_none
from ddpcli.rundir.record import Finding, Observed


def with_causes(
    findings: list[Finding],
    plan: dict[str, Any],
    observed: Observed,
    end: dict[str, Any],
    args: list[str] | None = None,  # the run's launch args with their placeholders (None: not known)
) -> list[Finding]:
    """The plan_mismatch findings with their cause appended to the message where one is seen."""
    explained = []
    for finding in findings:
        cause = None
        if finding.code == "plan_mismatch":
            cause = (
                partial_batch_cause(finding, end)
                or derived_cause(finding, observed, plan, args)
                or _cause(finding, plan, observed, end)
            )
        explained.append(finding.model_copy(update={"message": f"{finding.message}: {cause}"}) if cause else finding)
    return explained


def _cause(finding: Finding, plan: dict[str, Any], observed: Observed, end: dict[str, Any]) -> str | None:
    planned, seen = finding.planned, finding.observed
    if planned is None or seen is None:
        return None
    world = observed.world_size or whole_or_none(plan.get("world_size"))
    if finding.field == "total_steps":
        if seen == planned + 1:
            return (
                "the script runs one step more than the count it is given (a loop to the count inclusive, "
                f"`while step <= max_steps`); pass {planned - 1} to run {planned}"
            )
        checkpoint = _resumed_from(end)
        if checkpoint and seen < planned:
            return f"the script {checkpoint} and resumed from it"
    if finding.field == "lr":
        baseline = _baseline_lr(plan)
        if baseline is not None and math.isclose(seen, baseline, rel_tol=1e-6):
            return (
                f"the lr stayed at the baseline's {baseline:g} though the plan scaled it: the script hard-codes its "
                "lr or ignores the flag (wire it with `{lr}` in args)"
            )
    if finding.field == "world_size" and seen == 1 and end.get("process_group") is False:
        return f"no process called init_process_group: {planned} separate trainings (see no_process_group)"
    launched = max(world or 0, whole_or_none(plan.get("world_size")) or 0)
    if finding.field == "global_batch_size" and observed.data_parallel_size == 1 and launched > 1:
        return "the processes never averaged their gradients: each trained alone, its own model"
    return None


def _baseline_lr(plan: dict[str, Any]) -> float | None:
    lr, scale, scaling = finite_or_none(plan.get("lr")), finite_or_none(plan.get("batch_scale")), plan.get("scaling")
    if lr is None or scale is None or scale <= 0 or math.isclose(scale, 1.0) or scaling not in ("linear", "sqrt"):
        return None
    return lr / (scale if scaling == "linear" else math.sqrt(scale))


def _loaded(end: dict[str, Any]) -> list[dict[str, Any]]:
    files = end.get("loaded")
    return [entry for entry in files if isinstance(entry, dict) and text_or_none(entry.get("path"))] if isinstance(
        files, list
    ) else []  # fmt: skip


def _resumed_from(end: dict[str, Any]) -> str | None:
    """`loaded PATH before its first step (written by run X ...)` for the file most likely its checkpoint."""
    files = _loaded(end)
    if not files:
        return None
    chosen = next((entry for entry in files if entry.get("written_by") or entry.get("during_sweep")), files[-1])
    return f"loaded {chosen['path']} before its first step ({_written(chosen)})"


def _written(entry: dict[str, Any]) -> str:
    mtime = finite_or_none(entry.get("mtime"))
    when = (
        datetime.fromtimestamp(mtime, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if mtime else "at a time unknown"
    )
    words = f"modified {when}"
    if entry.get("own_run") is True:
        return f"{words}: this run's own checkpoint, which a restart or a resume goes on from"
    if entry.get("during_sweep") is True:
        words += ", after this sweep began"
    writer = text_or_none(entry.get("written_by"))
    return f"{words}; written by run {writer}" if writer else words


def loss_scale_findings(steps: dict[int, dict[str, Any]], world: int | None) -> list[Finding]:
    """`loss_scaled_by_world_size`: the loss back-propagated is the world size times the loss the model returned at
    every step (transformers' Trainer multiplies it so that DDP's average gives the mean over every process's
    tokens): the gradients are right, but the loss curve reads world-size times a single process's."""
    if not world or world < 2:
        return []
    ratios = []
    for row in steps.values():
        back, model = finite_or_none(row.get("loss")), finite_or_none(row.get("output_loss"))
        if back is None or not model:
            continue
        ratios.append(back / model)
    if not ratios or not all(math.isclose(ratio, world, rel_tol=1e-3) for ratio in ratios):
        return []
    return [Finding(
        code="loss_scaled_by_world_size", severity="warning",
        message=f"the loss back-propagated is {world} x the loss the model returned at every step: the script (or its "
        f"framework: transformers' Trainer does, averaging tokens across devices) scales it by the world size, so "
        f"its loss curve reads {world} x a single process's though the gradients are the same",
    )]  # fmt: skip


def script_findings(end: dict[str, Any], steps: int | None) -> list[Finding]:
    """What the script did at start: a checkpoint of another run (processes it spawned: diagnosis.script_io)."""
    found = []  # processes spawned: ddpcli.diagnosis.script_io
    for entry in _loaded(end):
        if entry.get("written_by") or entry.get("during_sweep") is True:
            found.append(Finding(
                code="resumed_from_other_run", severity="warning",
                message=f"the script loaded {entry['path']} before its first step ({_written(entry)}): it started "
                "from what another run left, not from scratch (delete the file, or give each run its own path with "
                "`{run_dir}`)",
            ))  # fmt: skip
            break
    return found
